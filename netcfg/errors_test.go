package netcfg

import (
	"errors"
	"strings"
	"testing"

	"github.com/virtcon/virtcon/internal/fielderr"
)

// The default-route rule's problems carry their kind (ErrNeedsTry, and
// which of the two), so that each face words the way out itself; none of
// netcfg's messages names a CLI flag. Other problems are not ErrNeedsTry.
func TestDefaultRouteRuleKinds(t *testing.T) {
	c := testConfig()
	c.Bridges[0].Ports = []string{"eth0"}
	c.Management.Interface = "br0"
	c.Bridges[0].Addresses = nil
	c.Hostname = "-bad-"
	var ve *ValidationError
	if err := Validate(c, testLive(), ValidateOptions{}); !errors.As(err, &ve) {
		t.Fatalf("Validate = %v; want a *ValidationError", err)
	}
	found := false
	for _, fe := range ve.Errs {
		needsTry := errors.Is(fe, ErrNeedsTry)
		if fe.Field == "bridges[0].ports[0]" {
			found = true
			if !needsTry || !errors.Is(fe, ErrPortCarriesDefaultRoute) || !errors.Is(fe, ErrInvalid) || !errors.Is(fe, fielderr.ErrInvalid) {
				t.Errorf("%v: want ErrPortCarriesDefaultRoute, ErrNeedsTry, ErrInvalid and fielderr.ErrInvalid", fe)
			}
		} else if needsTry {
			t.Errorf("%v: ErrNeedsTry; want only the default-route rule's problems to be", fe)
		}
		if strings.Contains(fe.Msg, "--") {
			t.Errorf("%v names a CLI flag", fe)
		}
	}
	if !found {
		t.Errorf("Validate = %v; want the default-route rule on bridges[0].ports[0]", ve)
	}
	if errors.Is(ve, ErrNeedsTry) {
		t.Errorf("errors.Is(list, ErrNeedsTry) = true; want a list to be only its own kind")
	}

	// a plan's step that removes the default route
	live := testLive()
	live.Links[1].Master = "br0"
	live.Links[1].Addresses = nil
	live.Links = append(live.Links, Link{Name: "br0", Type: "bridge", Index: 6, MTU: 1500, Up: true, Addresses: pfx("192.0.2.10/24")})
	live.Routes[0].Link = "br0"
	prev := &Config{APIVersion: APIVersion, Kind: Kind, Bridges: []Bridge{{Name: "br0", Ports: []string{"eth0"}}}}
	steps := Plan(&Config{APIVersion: APIVersion, Kind: Kind}, live, prev)
	if len(steps) != 1 || steps[0].risk == nil {
		t.Fatalf("Plan = %q; want one risky step", descs(steps))
	}
	if r := steps[0].risk; !errors.Is(r, ErrChangesDefaultRoute) || !errors.Is(r, ErrNeedsTry) || errors.Is(r, ErrPortCarriesDefaultRoute) || strings.Contains(r.Msg, "--") {
		t.Errorf("risk %v (kind %v); want ErrChangesDefaultRoute, ErrNeedsTry, no CLI flag", r, r.Kind)
	}
}

// A FieldError netcfg returns alone is ErrInvalid, as one in a list is.
func TestLoneFieldErrorIsInvalid(t *testing.T) {
	_, err := ResetManagementDHCP(nil, "vcnosuchnic0", &State{})
	var fe *FieldError
	if !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) || !errors.Is(err, fielderr.ErrInvalid) || errors.Is(err, ErrNeedsTry) {
		t.Errorf("ResetManagementDHCP = %v; want a lone FieldError that is ErrInvalid (and not ErrNeedsTry)", err)
	}
}
