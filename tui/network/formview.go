package network

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/tui/styles"
)

// formKind is what an edit form edits.
type formKind int

const (
	formManagement formKind = iota // the management interface, DNS, host name
	formAddBridge                  // a new bridge
	formEditBridge                 // a bridge of the file
)

// formView is the edit-form mode: a form over the file as it was when
// the form opened, submitted to admission and then to the review.
type formView struct {
	*form
	sh   *shared
	kind formKind
	idx  int // the bridge edited (formEditBridge)
	w    int
}

var _ part = (*formView)(nil)

// SetSize lays the form out; it takes the lines it needs.
func (v *formView) SetSize(w, _ int) { v.w = w }

// Capturing: a form takes every key.
func (v *formView) Capturing() bool { return true }

// ShortHelp is the form's legend.
func (v *formView) ShortHelp() []key.Binding {
	k := v.sh.keys
	return []key.Binding{k.Next, k.Prev, k.Submit, k.Cancel}
}

// CLI is the command that makes the same change.
func (v *formView) CLI() string {
	if v.kind == formAddBridge {
		return v.addBridgeCLI()
	}
	return "virt net apply -f " + v.sh.opts.DesiredFile + tryFlag()
}

// Lines draws the form.
func (v *formView) Lines() []string { return v.lines(v.sh.c.Styles, v.w) }

// Update answers the form's keys: esc closes it, enter or ctrl+s submits.
func (v *formView) Update(msg tea.KeyPressMsg) (intent, tea.Cmd) {
	res, cmd := v.update(msg)
	switch res {
	case formCancel:
		v.sh.say(styles.Info, "cancelled: nothing changed")
		return toOverview{}, cmd
	case formSubmit:
		return v.submit(), cmd
	}
	return nil, cmd
}

// newManagementForm is the form of the management interface.
func newManagementForm(sh *shared) *formView {
	s := sh.c.Styles
	mg := netcfg.Management{}
	if sh.desired.Management != nil {
		mg = *sh.desired.Management
	}
	f := &form{title: "Management interface"}
	mode := 1
	if mg.DHCP {
		mode = 0
	}
	f.choiceField("Mode", "management.dhcp", []string{"dhcp", "static"}, mode)
	f.textField(s, "Interface", "management.interface", mg.Interface, "(e.g. eno1)")
	isDHCP := func(f *form) bool { return f.fields[0].value() == "dhcp" }
	f.textField(s, "Addresses", "management.addresses", strings.Join(mg.Addresses, ", "), "(e.g. 192.0.2.10/24, ...)").hidden = isDHCP
	f.textField(s, "Gateway", "management.gateway", mg.Gateway, "(none)").hidden = isDHCP
	f.textField(s, "VLAN", "management.vlan", itoa(mg.VLAN), "(untagged)")
	f.textField(s, "MTU", "management.mtu", itoa(mg.MTU), "(kernel default)")
	f.textField(s, "DNS servers", "dns.servers", strings.Join(sh.desired.DNS.Servers, ", "), "(none)")
	f.textField(s, "Hostname", "hostname", sh.desired.Hostname, "(unchanged)")
	f.focus = 1
	f.refocus()
	return &formView{form: f, sh: sh, kind: formManagement}
}

// newBridgeForm is the form of the bridge at idx, or of a new one when
// idx < 0.
func newBridgeForm(sh *shared, idx int) *formView {
	s := sh.c.Styles
	b := netcfg.Bridge{}
	title := "Add a bridge"
	v := &formView{sh: sh, kind: formAddBridge, idx: idx}
	if idx >= 0 {
		b, title, v.kind = sh.desired.Bridges[idx], "Bridge "+sh.desired.Bridges[idx].Name, formEditBridge
	}
	// errors name the bridge by its index in the new file
	p := v.bridgePath()
	f := &form{title: title}
	f.textField(s, "Name", "bridges.name", b.Name, "(e.g. br0)")
	f.textField(s, "Ports", "bridges.ports", strings.Join(b.Ports, ", "), "(no uplinks)")
	f.textField(s, "Addresses", "bridges.addresses", strings.Join(b.Addresses, ", "), "(none)")
	stp := 0
	if b.STP {
		stp = 1
	}
	f.choiceField("STP", "bridges.stp", []string{"off", "on"}, stp)
	// the error paths of this bridge
	for _, fl := range f.fields {
		fl.path = p + strings.TrimPrefix(fl.path, "bridges")
	}
	f.refocus()
	v.form = f
	return v
}

func itoa(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}

// bridgePath is the error path of the bridge the form edits: its index
// in the new file.
func (v *formView) bridgePath() string {
	if v.kind == formEditBridge {
		return fmt.Sprintf("bridges[%d]", v.idx)
	}
	n := 0
	if v.sh.desired != nil {
		n = len(v.sh.desired.Bridges)
	}
	return fmt.Sprintf("bridges[%d]", n)
}

func (v *formView) addBridgeCLI() string {
	f, p := v.form, v.bridgePath()
	name := f.get(p + ".name").value()
	if name == "" {
		name = "NAME"
	}
	args := []string{"virt net bridge create", name}
	for _, port := range splitList(f.get(p + ".ports").value()) {
		args = append(args, "--port", port)
	}
	for _, a := range splitList(f.get(p + ".addresses").value()) {
		args = append(args, "--address", a)
	}
	if f.get(p+".stp").value() == "on" {
		args = append(args, "--stp")
	}
	return strings.Join(args, " ") + tryFlag()
}

// submit builds the new configuration from the form and, when it passes
// admission, asks for the review; else the form shows the errors.
func (v *formView) submit() intent {
	f, desired := v.form, v.sh.desired
	next := desired.Clone()
	var errs []string
	num := func(path string) int {
		fl := f.get(path)
		if fl.value() == "" {
			return 0
		}
		n, err := strconv.Atoi(fl.value())
		if err != nil {
			errs = append(errs, (&netcfg.FieldError{Field: path, Value: fl.value(), Msg: "must be a whole number"}).Error())
		}
		return n
	}
	var what, cli string
	switch v.kind {
	case formManagement:
		mg := &netcfg.Management{Interface: f.get("management.interface").value(), DHCP: f.get("management.dhcp").value() == "dhcp"}
		if !mg.DHCP {
			mg.Addresses = splitList(f.get("management.addresses").value())
			mg.Gateway = f.get("management.gateway").value()
		}
		mg.VLAN, mg.MTU = num("management.vlan"), num("management.mtu")
		next.Management = mg
		next.DNS.Servers = splitList(f.get("dns.servers").value())
		next.Hostname = f.get("hostname").value()
		what, cli = "edit the management interface", "virt net apply -f "+v.sh.opts.DesiredFile+tryFlag()
	default:
		p := v.bridgePath()
		b := netcfg.Bridge{}
		if v.kind == formEditBridge {
			b = desired.Bridges[v.idx]
		}
		b.Name = f.get(p + ".name").value()
		b.Ports = splitList(f.get(p + ".ports").value())
		b.Addresses = splitList(f.get(p + ".addresses").value())
		b.STP = f.get(p+".stp").value() == "on"
		if v.kind == formEditBridge {
			next.Bridges[v.idx] = b
			what, cli = "edit bridge "+b.Name, "virt net apply -f "+v.sh.opts.DesiredFile+tryFlag()
		} else {
			var err error
			if next, err = netcfg.AddBridge(desired, b); err != nil {
				errs = append(errs, (&netcfg.FieldError{Field: p + ".name", Value: b.Name, Msg: "a bridge of that name is already in the file"}).Error())
				next = desired.Clone()
			}
			what, cli = "add bridge "+b.Name, v.addBridgeCLI()
		}
	}
	if len(errs) == 0 {
		errs = admissionErrors(next, v.sh.state)
	}
	f.errs = errs
	if len(errs) > 0 {
		return nil
	}
	return toReview{base: desired, next: next, what: what, cli: cli}
}

// admissionErrors are netcfg's objections to cfg, one per field.
func admissionErrors(cfg *netcfg.Config, live *netcfg.State) []string {
	// the change is applied on trial, whose rollback is the safety net
	_, err := netcfg.Admit(cfg, live, netcfg.ValidateOptions{AllowDefaultRouteChange: true})
	if err == nil {
		return nil
	}
	var ve *netcfg.ValidationError
	if errors.As(err, &ve) {
		out := make([]string, len(ve.Errs))
		for i, fe := range ve.Errs {
			out[i] = fe.Error()
		}
		return out
	}
	return []string{err.Error()}
}
