package codemode

import "context"

// WaitPoolFull waits until every pool place holds a started instance.
func WaitPoolFull(ctx context.Context, e *Engine) error { return e.WaitPoolFull(ctx) }
