package driver_test

import (
	"testing"

	"github.com/babelqueue/transports/core/driver"
)

// nativeToken is a driver token that serves As itself.
type nativeToken struct{ native string }

func (t *nativeToken) As(target any) bool {
	p, ok := target.(*string)
	if ok {
		*p = t.native
	}
	return ok
}

func TestDeliveryAs(t *testing.T) {
	var got string
	if (*driver.Delivery)(nil).As(&got) {
		t.Error("a nil delivery's As reported true")
	}
	if (&driver.Delivery{Token: "plain"}).As(&got) {
		t.Error("As reported true without AsFunc or a token that serves it")
	}
	d := &driver.Delivery{Token: &nativeToken{"from the token"}}
	if !d.As(&got) || got != "from the token" {
		t.Errorf("As through the token: %v, %q", d.As(&got), got)
	}
	var n int
	if d.As(&n) {
		t.Error("As through the token reported true for a foreign type")
	}
	d.AsFunc = func(target any) bool {
		p, ok := target.(*string)
		if ok {
			*p = "from AsFunc"
		}
		return ok
	}
	if !d.As(&got) || got != "from AsFunc" {
		t.Errorf("AsFunc is not the one served first: %q", got)
	}
}
