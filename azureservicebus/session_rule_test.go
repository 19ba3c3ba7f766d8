package azureservicebus

import (
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/babelqueue/transports/core/driver"
)

// TestCoalescesOnlyWhatProjectLeavesSessionless pins the coalescing
// decision to Project's session rule: a message is coalesced exactly when
// Project gives it no session and no fallback could give it one.
func TestCoalescesOnlyWhatProjectLeavesSessionless(t *testing.T) {
	sid := "s-1"
	fromSession := &driver.Delivery{Token: &token{msg: &azservicebus.ReceivedMessage{SessionID: &sid}}}
	fromSessionToken := &driver.Delivery{Token: &sessionToken{msg: &azservicebus.ReceivedMessage{SessionID: &sid}}}
	fromPlain := &driver.Delivery{Token: &token{msg: &azservicebus.ReceivedMessage{}}}
	fallback := func(*driver.Message) string { return "" }
	for _, c := range []struct {
		name     string
		m        *driver.Message
		fallback func(*driver.Message) string
		want     bool
	}{
		{"plain", &driver.Message{Queue: "q"}, nil, true},
		{"keyed", &driver.Message{Queue: "q", Key: "k"}, nil, false},
		{"copy of a session message", &driver.Message{Queue: "q", Origin: fromSession}, nil, false},
		{"copy of a session receiver's message", &driver.Message{Queue: "q", Origin: fromSessionToken}, nil, false},
		{"copy of a sessionless message", &driver.Message{Queue: "q", Origin: fromPlain}, nil, true},
		{"fallback set", &driver.Message{Queue: "q"}, fallback, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := NewSender(nil, WithSessionFallback(c.fallback))
			if got := s.sessionless(c.m); got != c.want {
				t.Errorf("sessionless = %v, want %v", got, c.want)
			}
			if c.fallback == nil {
				if projected := Project(c.m, time.Now()).SessionID == nil; projected != c.want {
					t.Errorf("Project leaves it without a session: %v, coalescing decision: %v", projected, c.want)
				}
			}
		})
	}
}
