package dispatcher

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/policy"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
)

// dispatchMetrics are the dispatcher's counters.
type dispatchMetrics struct {
	decisions metric.Int64Counter // tool.dataflow.decision.total{toolName,decision,flow}
	// errors counts the calls the dispatcher ends itself (schema, unknown
	// tool, data-flow gate, approval without an approver, unavailable):
	// the same instrument the workers count the calls they ran with, so
	// that tool.executor.errors.total holds every failed call once.
	errors metric.Int64Counter // tool.executor.errors.total{toolName,kind,tenant}
	// quota counts the calls a quota turned away.
	quota   metric.Int64Counter // graphorin.quota.refused.total{tenant,kind}
	tenants *tenantLabels
}

func newDispatchMetrics(m metric.Meter) (dispatchMetrics, error) {
	var d dispatchMetrics
	var err error
	if d.decisions, err = m.Int64Counter("tool.dataflow.decision.total",
		metric.WithDescription("Data-flow policy decisions on sink calls (REF-F3), by decision and flow.")); err != nil {
		return d, err
	}
	if d.errors, err = m.Int64Counter("tool.executor.errors.total",
		metric.WithDescription("Tool calls that ended with an error, by kind.")); err != nil {
		return d, err
	}
	d.tenants = &tenantLabels{}
	d.quota, err = m.Int64Counter("graphorin.quota.refused.total",
		metric.WithDescription("Calls a tenant's or principal's quota turned away, by tenant and kind (rate_limited, quota_exceeded)."))
	return d, err
}

// refused counts a call a quota turned away.
func (m dispatchMetrics) refused(ctx context.Context, id contracts.Identity, p *policy.Policy, te *contracts.ToolError) {
	m.quota.Add(ctx, 1, metric.WithAttributes(attribute.String(telemetry.AttrTenant, m.tenants.of(id, p)), attribute.String("kind", te.Kind.String())))
}

// tenantLabels names tenants on metrics with bounded cardinality
// (telemetry.TenantLabels), the tenants the policy lists always by name.
type tenantLabels struct{ telemetry.TenantLabels }

func (t *tenantLabels) of(id contracts.Identity, p *policy.Policy) string {
	return t.Of(id.Tenant, func(name string) bool { return p != nil && p.Tenants[name] != nil })
}
