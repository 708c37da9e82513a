package telemetry

import "sync"

// TenantLabels names tenants on metrics with bounded cardinality: the
// tenant's own name when it is listed (a policy names it) or while fewer
// than MaxTenantLabels have been named, "default" for the default tenant,
// "other" beyond. The principal is never a metric label: principals are
// many, and a label per principal would grow without bound. The zero
// value is ready to use.
type TenantLabels struct {
	mu   sync.Mutex
	seen map[string]bool
}

// MaxTenantLabels is how many unlisted tenants are named before the rest
// are counted as "other".
const MaxTenantLabels = 64

// Of is tenant's label; listed says a policy names the tenant.
func (t *TenantLabels) Of(tenant string, listed bool) string {
	if tenant == "" {
		return "default"
	}
	if listed {
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
