package tool

import (
	"time"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// RateLimited is the error a tool returns when the service behind it says
// "too many requests" (REF-X9): kind rate_limited, recoverable, with the
// delay the service asked for (0 when it gave none). Pure and read-only
// tools, and tools with an idempotency key, are retried automatically after
// that delay, or after 250·2^(n−1) ms without one.
func RateLimited(retryAfter time.Duration, format string, args ...any) *contracts.ToolError {
	e := contracts.NewError(contracts.KindRateLimited, format, args...)
	if retryAfter > 0 {
		e.RetryAfterMs = max(1, retryAfter.Milliseconds())
	}
	return e
}
