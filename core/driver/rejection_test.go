package driver_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/babelqueue/transports/core/driver"
)

func TestRejectionMatches(t *testing.T) {
	tooMany := driver.Rejection("sqs: more than 10 attributes", nil)
	ownTooLarge := driver.Rejection("asb: too large", driver.ErrTooLarge)
	wrapped := func(err error) error { return fmt.Errorf("publishing to q: %w", err) }
	for _, c := range []struct {
		name                     string
		err                      error
		itself, rejected, sizeOf bool
	}{
		{"ErrTooLarge", wrapped(driver.ErrTooLarge), false, true, true},
		{"a driver's size error", wrapped(ownTooLarge), true, true, true},
		{"another rejection", wrapped(tooMany), false, true, false},
		{"a transient error", wrapped(errors.New("connection reset")), false, false, false},
	} {
		if got := errors.Is(c.err, driver.ErrRejected); got != c.rejected {
			t.Errorf("%s: errors.Is(ErrRejected) = %v, want %v", c.name, got, c.rejected)
		}
		if got := errors.Is(c.err, driver.ErrTooLarge); got != c.sizeOf {
			t.Errorf("%s: errors.Is(ErrTooLarge) = %v, want %v", c.name, got, c.sizeOf)
		}
		if got := errors.Is(c.err, ownTooLarge); got != c.itself {
			t.Errorf("%s: errors.Is(its own sentinel) = %v, want %v", c.name, got, c.itself)
		}
	}
	if errors.Is(driver.Rejection("x", nil), driver.Rejection("x", nil)) {
		t.Error("two rejections with the same text match each other")
	}
	if got := driver.ErrTooLarge.Error(); got != "babelqueue: message exceeds the broker's size limit" {
		t.Errorf("ErrTooLarge reads %q", got)
	}
}
