package codemode

import "context"

// WaitPoolFull waits until every pool place holds a started instance.
func WaitPoolFull(ctx context.Context, e *Engine) error {
	for len(e.pool) < cap(e.pool) {
		select {
		case <-e.pooled:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
