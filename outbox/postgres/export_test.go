package outbox

import "context"

// SetAfterSend makes r call fn after the publish and before marking the
// rows sent; an error from fn aborts the round as a crash would.
func SetAfterSend(r *Relay, fn func(ctx context.Context) error) { r.afterSend = fn }
