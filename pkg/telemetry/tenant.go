package telemetry

import "sync"

// AttrTenant is the metric attribute of the tenant a call belongs to.
// Principals are never a metric attribute: they are many.
const AttrTenant = "tenant"

// MaxTenantLabels is how many tenant names one process puts on metrics;
// beyond, a tenant is "other".
const MaxTenantLabels = 64

// TenantLabels names tenants on metrics with bounded cardinality: the
// default tenant "default", a tenant its first MaxTenantLabels names (or
// any name known reports true for), "other" beyond. The zero value is
// ready to use.
type TenantLabels struct {
	mu   sync.Mutex
	seen map[string]bool
}

// Of is tenant's label; known, if not nil, says whether a name is one
// the operator configured (always its own label).
func (t *TenantLabels) Of(tenant string, known func(string) bool) string {
	if tenant == "" {
		return "default"
	}
	if known != nil && known(tenant) {
		return tenant
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.seen[tenant] {
		return tenant
	}
	if len(t.seen) < MaxTenantLabels {
		if t.seen == nil {
			t.seen = map[string]bool{}
		}
		t.seen[tenant] = true
		return tenant
	}
	return "other"
}
