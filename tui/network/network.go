package network

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"

	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/styles"
	"github.com/virtcon/virtcon/tui/term"
)

// TryFor is how long a change from this screen is on trial before the
// watchdog rolls it back.
const TryFor = 60 * time.Second

// Timeouts of the screen's host calls.
const (
	loadTimeout = 10 * time.Second
	// applyTimeout covers a try: apply and verify end before its deadline.
	applyTimeout = TryFor + 30*time.Second
	// testTimeout covers TestManagement, whose checks run at once.
	testTimeout = 2*netcfg.DefaultTestTimeout + 5*time.Second
	// reloadEvery is the period of the background reload, in ticks.
	reloadEvery = 5
)

// Options configure the screen.
type Options struct {
	// DesiredFile is network.yaml as the CLI line names it; default
	// /etc/virtcon/network.yaml.
	DesiredFile string
}

type mode int

const (
	modeMain    mode = iota
	modeForm         // an edit form
	modeDiff         // the review of a change, asking to apply it on trial
	modeBusy         // the trial apply runs
	modeKeep         // "keep these settings?" with the countdown
	modeNICs         // pick the NIC for a DHCP reset
	modeDelete       // confirm deleting a bridge
	modeResults      // the management network test
)

// Messages of the screen's commands.
type (
	loadedMsg struct {
		desired, applied *netcfg.Config
		state            *netcfg.State
		pending          *netcfg.Pending
		err              error
		// fallback and why: what the DHCP reset starts from when the
		// desired file did not load (nil when it did).
		fallback    *netcfg.Config
		fallbackWhy string
	}
	// pollMsg is the state of a try while its dialog is up.
	pollMsg struct {
		pending *netcfg.Pending
		applied *netcfg.Config
		err     error
	}
	appliedMsg struct {
		res     *netcfg.Result
		pending *netcfg.Pending
		err     error
	}
	confirmedMsg  struct{ err error }
	rolledBackMsg struct{ err error }
	testedMsg     struct{ results []netcfg.TestResult }
	nicsMsg       struct {
		nics []string
		err  error
	}
)

// edit is a change under review: the new configuration and what it is.
type edit struct {
	next  *netcfg.Config
	what  string // "edit management interface"
	cli   string // the equivalent command
	note  string // a warning shown above the changes
	diff  []string
	steps []string
}

// Model is the Network screen.
type Model struct {
	c    common.Common
	src  Sources
	opts Options
	w, h int

	mode mode
	// btn is the focused button of a dialog; 0 is always the safe one.
	btn int

	desired, applied *netcfg.Config
	state            *netcfg.State
	pending          *netcfg.Pending
	loadErr          error
	loaded, loading  bool
	ticks            int

	// fallback is what the DHCP reset (z) starts from while the desired
	// file does not load, and fallbackWhy says why: the reset is the way
	// back from a broken file.
	fallback    *netcfg.Config
	fallbackWhy string

	sel int // selected bridge

	form     *form
	formKind string // "management", "add", "edit"
	formIdx  int    // the bridge edited
	edit     *edit

	// tryOld is the applied configuration before the try on trial, to
	// tell a rollback from a confirm when the try ends elsewhere.
	tryOld          *netcfg.Config
	polling, acting bool

	nics   []string
	nicSel int

	results []netcfg.TestResult
	testing bool

	msg      string
	msgLevel styles.Level
}

var _ common.Screen = (*Model)(nil)

// New returns the Network screen.
func New(c common.Common, src Sources, opts Options) *Model {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Session == nil {
		c.Session = &common.Session{}
	}
	if opts.DesiredFile == "" {
		opts.DesiredFile = "/etc/virtcon/network.yaml"
	}
	return &Model{c: c, src: src, opts: opts, w: 76, h: 17}
}

// Title names the screen.
func (m *Model) Title() string { return "Network" }

// PendingTry is the network change on trial as the screen knows it (at
// once for one it started), nil when none: the app asks before quitting
// while one is.
func (m *Model) PendingTry() *netcfg.Pending { return m.pending }

// SetSize lays the content area out for w x h.
func (m *Model) SetSize(w, h int) { m.w, m.h = max(w, 1), max(h, 1) }

// Capturing reports that a form or a dialog takes every key. The keep
// dialog of a read-only console does not: it can only watch.
func (m *Model) Capturing() bool {
	switch m.mode {
	case modeForm, modeDiff, modeNICs, modeDelete:
		return true
	case modeKeep:
		return m.c.Session.CanWrite()
	}
	return false
}

// Init does nothing: the screen loads on ActivateMsg.
func (m *Model) Init() tea.Cmd { return nil }

// Keys of the screen. None is a letter the global map reserves.
var (
	keyEdit     = key.NewBinding(key.WithKeys("e"), key.WithHelp("e", "edit mgmt"))
	keyAdd      = key.NewBinding(key.WithKeys("a"), key.WithHelp("a", "add bridge"))
	keyOpen     = key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "edit"))
	keyDelete   = key.NewBinding(key.WithKeys("delete", "-"), key.WithHelp("-/del", "delete"))
	keyTest     = key.NewBinding(key.WithKeys("t"), key.WithHelp("t", "test"))
	keyRetest   = key.NewBinding(key.WithKeys("t"), key.WithHelp("t", "test again"))
	keyReset    = key.NewBinding(key.WithKeys("z"), key.WithHelp("z", "DHCP reset"))
	keyConfirm  = key.NewBinding(key.WithKeys("c"), key.WithHelp("c", "keep trial"))
	keyRollback = key.NewBinding(key.WithKeys("b"), key.WithHelp("b", "roll back"))
	keyUp       = key.NewBinding(key.WithKeys("up", "k"), key.WithHelp("up/k", "up"))
	keyDown     = key.NewBinding(key.WithKeys("down", "j"), key.WithHelp("down/j", "down"))

	keyNext   = key.NewBinding(key.WithKeys("tab"), key.WithHelp("tab", "next field"))
	keyPrev   = key.NewBinding(key.WithKeys("shift+tab"), key.WithHelp("shift+tab", "previous"))
	keySubmit = key.NewBinding(key.WithKeys("ctrl+s"), key.WithHelp("^S/enter", "review"))
	keyCancel = key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "cancel"))

	keyKeep     = key.NewBinding(key.WithKeys("k"), key.WithHelp("k", "keep"))
	keyBack     = key.NewBinding(key.WithKeys("b", "esc"), key.WithHelp("b/esc", "roll back now"))
	keyPick     = key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "pick"))
	keyClose    = key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "close"))
	keyButtons  = key.NewBinding(key.WithKeys("left", "right"), key.WithHelp("left/right", "button"))
	keyActivate = key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "press button"))
)

// ShortHelp is the key legend of the current mode; each fits one
// 76-column line.
func (m *Model) ShortHelp() []key.Binding {
	switch m.mode {
	case modeForm:
		return []key.Binding{keyNext, keyPrev, keySubmit, keyCancel}
	case modeDiff:
		return common.ConfirmHelp("apply on trial")
	case modeKeep:
		return []key.Binding{keyKeep, keyBack, keyButtons, keyActivate}
	case modeNICs:
		return []key.Binding{keyUp, keyDown, keyPick, keyCancel}
	case modeDelete:
		return common.ConfirmHelp("delete, then review")
	case modeResults:
		return []key.Binding{keyRetest, keyClose}
	}
	if m.pending != nil {
		// editing waits for the trial to end: keep or roll back first
		return []key.Binding{keyConfirm, keyRollback, keyTest, keyUp, keyDown}
	}
	return []key.Binding{keyEdit, keyAdd, keyOpen, keyDelete, keyTest, keyReset}
}

// FullHelp is every key of the screen, by mode.
func (m *Model) FullHelp() [][]key.Binding {
	return [][]key.Binding{
		{keyEdit, keyAdd, keyOpen, keyDelete, keyTest, keyReset, keyConfirm, keyRollback, keyUp, keyDown},
		{keyNext, keyPrev, keySubmit, keyCancel},
		append(common.ConfirmHelp("apply or delete"), keyKeep, keyBack, keyButtons, keyActivate),
	}
}

// CLI is the virt command for what the screen shows or is about to do.
func (m *Model) CLI() string {
	tryArg := tryFlag()
	switch m.mode {
	case modeForm:
		if m.formKind == "add" {
			return m.addBridgeCLI()
		}
		return "virt net apply -f " + m.opts.DesiredFile + tryArg
	case modeDiff, modeBusy:
		if m.edit != nil {
			return m.edit.cli
		}
	case modeKeep:
		return "virt net confirm   (roll back: virt net rollback)"
	case modeNICs:
		nic := "IFACE"
		if m.nicSel < len(m.nics) {
			nic = m.nics[m.nicSel]
		}
		return "virt net reset-dhcp " + nic + tryArg
	case modeDelete:
		if b := m.selected(); b != nil {
			return "virt net bridge delete " + b.Name + tryArg
		}
	case modeResults:
		return "virt net test"
	}
	return "virt net show   (bridges: virt net bridge list)"
}

// bridgePath is the error path of the bridge the form edits: its index
// in the new file.
func (m *Model) bridgePath() string {
	if m.formKind == "edit" {
		return fmt.Sprintf("bridges[%d]", m.formIdx)
	}
	n := 0
	if m.desired != nil {
		n = len(m.desired.Bridges)
	}
	return fmt.Sprintf("bridges[%d]", n)
}

func (m *Model) addBridgeCLI() string {
	f, p := m.form, m.bridgePath()
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

// Commands. Each copies what it needs, so it never reads the model
// after Update returned.

func (m *Model) load() tea.Cmd {
	if m.loading || m.src == nil {
		return nil
	}
	m.loading = true
	src := m.src
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
		defer cancel()
		var msg loadedMsg
		var errs []error
		var err error
		if msg.desired, err = src.LoadDesired(); err != nil {
			errs = append(errs, err)
			msg.fallback, msg.fallbackWhy = src.LoadDesiredOrFallback()
		}
		if msg.applied, err = src.LoadApplied(); err != nil {
			errs = append(errs, err)
		}
		if msg.state, err = src.ReadState(ctx); err != nil {
			errs = append(errs, err)
		}
		if msg.pending, err = src.PendingTry(); err != nil {
			errs = append(errs, err)
		}
		msg.err = errors.Join(errs...)
		return msg
	}
}

func (m *Model) poll() tea.Cmd {
	if m.polling {
		return nil
	}
	m.polling = true
	src := m.src
	return func() tea.Msg {
		p, err := src.PendingTry()
		if err != nil || p != nil {
			return pollMsg{pending: p, err: err}
		}
		applied, err := src.LoadApplied()
		return pollMsg{applied: applied, err: err}
	}
}

func (m *Model) applyCmd(cfg *netcfg.Config) tea.Cmd {
	src := m.src
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), applyTimeout)
		defer cancel()
		res, p, err := src.ApplyDesired(ctx, cfg, netcfg.DesiredOptions{Try: TryFor})
		return appliedMsg{res, p, err}
	}
}

func (m *Model) confirmCmd() tea.Cmd {
	m.acting = true
	src := m.src
	return func() tea.Msg { return confirmedMsg{src.ConfirmDesired()} }
}

func (m *Model) rollbackCmd() tea.Cmd {
	m.acting = true
	src := m.src
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
		defer cancel()
		return rolledBackMsg{src.RollbackDesired(ctx)}
	}
}

func (m *Model) testCmd() tea.Cmd {
	if m.testing {
		return nil
	}
	m.testing = true
	src := m.src
	return func() tea.Msg {
		// what the host is meant to have now: during a trial, the file
		// on trial, not network.yaml
		cfg, err := src.LoadEffective()
		if err != nil {
			return testedMsg{[]netcfg.TestResult{{Name: "network configuration", Detail: err.Error()}}}
		}
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		return testedMsg{src.TestManagement(ctx, cfg)}
	}
}

func (m *Model) nicsCmd() tea.Cmd {
	src := m.src
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
		defer cancel()
		nics, err := src.NICs(ctx)
		return nicsMsg{nics, err}
	}
}

func (m *Model) say(l styles.Level, format string, args ...any) {
	m.msg, m.msgLevel = m.clean(fmt.Sprintf(format, args...)), l
}

// clean makes host text safe to draw: link names come from the kernel,
// errors quote them and the file. ASCII only in the plain tier.
func (m *Model) clean(s string) string { return common.Clean(s, m.c.Tier == term.Plain) }

func (m *Model) log(msg string, args ...any) {
	if m.c.Logger != nil {
		m.c.Logger.Info("network screen: "+msg, args...)
	}
}

// mayWrite refuses, with the console's reason, when it is read-only.
func (m *Model) mayWrite() bool {
	if m.c.Session.CanWrite() {
		return true
	}
	m.say(styles.Warning, "%s", m.c.Session.ReadOnlyReason())
	return false
}

// Update handles keys and results. It never waits on the host.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case common.ActivateMsg, common.RefreshMsg:
		return m, m.load()
	case common.TickMsg:
		m.ticks++
		if m.mode == modeKeep {
			return m, m.poll()
		}
		if m.ticks%reloadEvery == 0 && m.mode == modeMain {
			return m, m.load()
		}
	case loadedMsg:
		m.loading, m.loaded = false, true
		m.loadErr = msg.err
		if msg.err != nil {
			m.log("load failed", "err", msg.err)
		}
		// an open form, review or dialog works on the file as it was
		// when it opened: its field paths index that file's bridges
		if msg.desired != nil && (m.desired == nil || m.mode == modeMain) {
			m.desired = msg.desired
		}
		m.applied, m.state = msg.applied, msg.state
		m.fallback, m.fallbackWhy = msg.fallback, msg.fallbackWhy
		if m.desired != nil && m.sel >= len(m.desired.Bridges) {
			m.sel = max(len(m.desired.Bridges)-1, 0)
		}
		m.setPending(msg.pending)
	case pollMsg:
		m.polling = false
		if msg.err != nil {
			m.log("poll failed", "err", msg.err)
			break
		}
		if msg.pending != nil {
			m.pending = msg.pending
			break
		}
		if m.pending != nil {
			m.tryEnded(msg.applied)
			return m, m.load()
		}
	case appliedMsg:
		return m, m.finishApply(msg)
	case confirmedMsg:
		m.acting = false
		if msg.err != nil {
			m.say(styles.Failure, "keep failed: %v", msg.err)
			if errors.Is(msg.err, netcfg.ErrNoPendingTry) {
				m.pending, m.mode = nil, modeMain
			}
			return m, m.load()
		}
		m.log("try confirmed")
		m.pending, m.mode = nil, modeMain
		m.say(styles.OK, "kept: the new settings are in %s", m.opts.DesiredFile)
		return m, m.load()
	case rolledBackMsg:
		m.acting = false
		if msg.err != nil {
			m.say(styles.Failure, "roll back failed: %v", msg.err)
			if errors.Is(msg.err, netcfg.ErrNoPendingTry) {
				m.pending, m.mode = nil, modeMain
			}
			return m, m.load()
		}
		m.log("try rolled back")
		m.pending, m.mode = nil, modeMain
		m.say(styles.Warning, "rolled back: the previous settings are restored")
		return m, m.load()
	case testedMsg:
		m.testing = false
		m.results = msg.results
	case nicsMsg:
		if msg.err != nil {
			m.say(styles.Failure, "cannot list NICs: %v", msg.err)
			m.mode = modeMain
			break
		}
		if m.mode == modeNICs {
			m.nics = msg.nics
			m.nicSel = 0
			if cur := m.mgmtInterface(); cur != "" {
				if i := slices.Index(m.nics, cur); i >= 0 {
					m.nicSel = i
				}
			}
		}
	case tea.KeyPressMsg:
		return m, m.key(msg)
	}
	return m, nil
}

// finishApply handles the end of a trial apply.
func (m *Model) finishApply(msg appliedMsg) tea.Cmd {
	if m.mode == modeBusy {
		m.mode = modeMain
	}
	if msg.err != nil {
		m.log("apply failed", "err", msg.err)
		if errors.Is(msg.err, netcfg.ErrTryPending) {
			// one started elsewhere since the last load, which shows it
			// with its deadline; the log has the whole error
			m.say(styles.Failure, "not applied: a change is on trial; keep (c) or roll back (b) first")
		} else {
			m.say(styles.Failure, "not applied: %v", msg.err)
		}
		return m.load()
	}
	m.log("try started", "deadline", msg.pending.Deadline)
	m.edit = nil
	m.msg = ""
	m.setPending(msg.pending)
	return m.load()
}

// setPending shows the keep dialog for a try on trial (started here, from
// the CLI or on another console), or notices that it ended.
func (m *Model) setPending(p *netcfg.Pending) {
	switch {
	case p != nil && (m.pending == nil || m.pending.ID != p.ID):
		m.pending = p
		m.tryOld = nil
		if len(p.Applied) > 0 {
			if old, err := netcfg.Decode(p.Applied); err == nil {
				m.tryOld = old
			}
		}
		if m.mode == modeMain || m.mode == modeResults || m.mode == modeBusy {
			m.mode, m.btn = modeKeep, 0
		}
	case p != nil:
		m.pending = p
	case m.pending != nil && !m.acting:
		m.tryEnded(m.applied)
	}
}

// tryEnded tells what became of a try that is no longer pending: the
// applied record is back to what it was before (rolled back), or not
// (kept, on another console or by the CLI).
func (m *Model) tryEnded(applied *netcfg.Config) {
	m.pending = nil
	if m.mode == modeKeep {
		m.mode = modeMain
	}
	if sameConfig(applied, m.tryOld) {
		m.say(styles.Warning, "rolled back: the trial ended unconfirmed; the previous settings are restored")
	} else {
		m.say(styles.OK, "kept: the trial was confirmed elsewhere")
	}
}

func sameConfig(a, b *netcfg.Config) bool { return len(netcfg.DiffConfigs(a, b)) == 0 }

func (m *Model) key(msg tea.KeyPressMsg) tea.Cmd {
	switch m.mode {
	case modeForm:
		return m.formKey(msg)
	case modeDiff:
		return m.diffKey(msg)
	case modeKeep:
		return m.keepKey(msg)
	case modeNICs:
		return m.nicsKey(msg)
	case modeDelete:
		return m.deleteKey(msg)
	case modeResults:
		switch msg.String() {
		case "esc", "enter":
			m.mode = modeMain
			return nil
		case "t":
			return m.testCmd()
		}
	case modeBusy:
		return nil
	}
	return m.mainKey(msg)
}

func (m *Model) mainKey(msg tea.KeyPressMsg) tea.Cmd {
	switch {
	case key.Matches(msg, keyUp):
		m.sel = max(m.sel-1, 0)
	case key.Matches(msg, keyDown):
		if m.desired != nil {
			m.sel = min(m.sel+1, max(len(m.desired.Bridges)-1, 0))
		}
	case key.Matches(msg, keyTest):
		if m.desired == nil {
			m.say(styles.Warning, "still loading")
			return nil
		}
		m.mode, m.results = modeResults, nil
		return m.testCmd()
	case key.Matches(msg, keyConfirm):
		if m.pending == nil {
			m.say(styles.Info, "no change on trial")
			return nil
		}
		if !m.mayWrite() {
			return nil
		}
		return m.confirmCmd()
	case key.Matches(msg, keyRollback):
		if m.pending == nil {
			m.say(styles.Info, "no change on trial")
			return nil
		}
		if !m.mayWrite() {
			return nil
		}
		return m.rollbackCmd()
	case key.Matches(msg, keyEdit, keyAdd, keyOpen, keyDelete, keyReset):
		if !m.mayWrite() {
			return nil
		}
		if m.desired == nil && !(key.Matches(msg, keyReset) && m.fallback != nil) {
			m.say(styles.Warning, "still loading")
			return nil
		}
		if m.pending != nil {
			m.say(styles.Warning, "a change is on trial: keep it (c) or roll it back (b) first")
			return nil
		}
		m.msg = ""
		switch {
		case key.Matches(msg, keyEdit):
			m.openManagementForm()
		case key.Matches(msg, keyAdd):
			m.openBridgeForm(-1)
		case key.Matches(msg, keyOpen):
			if m.selected() == nil {
				m.say(styles.Info, "no bridge to edit: a adds one")
				return nil
			}
			m.openBridgeForm(m.sel)
		case key.Matches(msg, keyDelete):
			if m.selected() == nil {
				m.say(styles.Info, "no bridge to delete")
				return nil
			}
			m.mode, m.btn = modeDelete, 0
		case key.Matches(msg, keyReset):
			m.mode, m.nics, m.nicSel = modeNICs, nil, 0
			return m.nicsCmd()
		}
	}
	return nil
}

func (m *Model) selected() *netcfg.Bridge {
	if m.desired == nil || m.sel < 0 || m.sel >= len(m.desired.Bridges) {
		return nil
	}
	return &m.desired.Bridges[m.sel]
}

func (m *Model) mgmtInterface() string {
	if m.desired == nil || m.desired.Management == nil {
		return ""
	}
	return m.desired.Management.Interface
}

func (m *Model) openManagementForm() {
	s := m.c.Styles
	mg := netcfg.Management{}
	if m.desired.Management != nil {
		mg = *m.desired.Management
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
	f.textField(s, "DNS servers", "dns.servers", strings.Join(m.desired.DNS.Servers, ", "), "(none)")
	f.textField(s, "Hostname", "hostname", m.desired.Hostname, "(unchanged)")
	f.focus = 1
	f.refocus()
	m.form, m.formKind, m.mode = f, "management", modeForm
}

func (m *Model) openBridgeForm(idx int) {
	s := m.c.Styles
	b := netcfg.Bridge{}
	title := "Add a bridge"
	kind := "add"
	if idx >= 0 {
		b, title, kind = m.desired.Bridges[idx], "Bridge "+m.desired.Bridges[idx].Name, "edit"
	}
	m.formKind, m.formIdx = kind, idx
	// errors name the bridge by its index in the new file
	p := m.bridgePath()
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
	m.form, m.mode = f, modeForm
}

func itoa(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}

func (m *Model) formKey(msg tea.KeyPressMsg) tea.Cmd {
	res, cmd := m.form.update(msg)
	switch res {
	case formCancel:
		m.mode, m.form = modeMain, nil
		m.say(styles.Info, "cancelled: nothing changed")
	case formSubmit:
		m.submit()
	}
	return cmd
}

// submit builds the new configuration from the form and, when it passes
// admission, opens the review.
func (m *Model) submit() {
	f := m.form
	next := m.desired.Clone()
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
	switch m.formKind {
	case "management":
		mg := &netcfg.Management{Interface: f.get("management.interface").value(), DHCP: f.get("management.dhcp").value() == "dhcp"}
		if !mg.DHCP {
			mg.Addresses = splitList(f.get("management.addresses").value())
			mg.Gateway = f.get("management.gateway").value()
		}
		mg.VLAN, mg.MTU = num("management.vlan"), num("management.mtu")
		next.Management = mg
		next.DNS.Servers = splitList(f.get("dns.servers").value())
		next.Hostname = f.get("hostname").value()
		what, cli = "edit the management interface", "virt net apply -f "+m.opts.DesiredFile+tryFlag()
	default:
		p := m.bridgePath()
		b := netcfg.Bridge{}
		if m.formKind == "edit" {
			b = m.desired.Bridges[m.formIdx]
		}
		b.Name = f.get(p + ".name").value()
		b.Ports = splitList(f.get(p + ".ports").value())
		b.Addresses = splitList(f.get(p + ".addresses").value())
		b.STP = f.get(p+".stp").value() == "on"
		if m.formKind == "edit" {
			next.Bridges[m.formIdx] = b
			what, cli = "edit bridge "+b.Name, "virt net apply -f "+m.opts.DesiredFile+tryFlag()
		} else {
			var err error
			if next, err = netcfg.AddBridge(m.desired, b); err != nil {
				errs = append(errs, (&netcfg.FieldError{Field: p + ".name", Value: b.Name, Msg: "a bridge of that name is already in the file"}).Error())
				next = m.desired.Clone()
			}
			what, cli = "add bridge "+b.Name, m.addBridgeCLI()
		}
	}
	if len(errs) == 0 {
		errs = admissionErrors(next, m.state)
	}
	f.errs = errs
	if len(errs) > 0 {
		return
	}
	m.review(next, what, cli)
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

// review opens the diff of a change and its plan, asking to apply it.
func (m *Model) review(next *netcfg.Config, what, cli string) {
	m.reviewFrom(m.desired, next, what, cli)
}

// reviewFrom is review with the file's changes counted from base.
func (m *Model) reviewFrom(base, next *netcfg.Config, what, cli string) {
	e := &edit{next: next, what: what, cli: cli, diff: netcfg.DiffConfigs(base, next)}
	for _, st := range netcfg.Plan(next, m.state, m.applied) {
		e.steps = append(e.steps, st.Desc)
	}
	if len(e.diff) == 0 && len(e.steps) == 0 {
		m.mode, m.form = modeMain, nil
		m.say(styles.Info, "no change: the file and the host already match")
		return
	}
	m.edit, m.mode, m.btn, m.form = e, modeDiff, 0, nil
}

func (m *Model) buttons(msg tea.KeyPressMsg) bool {
	switch msg.String() {
	case "left", "right", "tab", "shift+tab":
		m.btn = 1 - m.btn
		return true
	}
	return false
}

// diffKey answers the review as every confirmation does: y applies on
// trial, any other key cancels.
func (m *Model) diffKey(msg tea.KeyPressMsg) tea.Cmd {
	if !common.Confirmed(msg) {
		m.mode, m.edit = modeMain, nil
		m.say(styles.Info, "cancelled: nothing changed")
		return nil
	}
	if !m.mayWrite() {
		m.mode = modeMain
		return nil
	}
	m.mode = modeBusy
	m.log("apply on trial", "what", m.edit.what)
	return m.applyCmd(m.edit.next)
}

func (m *Model) keepKey(msg tea.KeyPressMsg) tea.Cmd {
	if m.buttons(msg) {
		return nil
	}
	if m.acting {
		return nil
	}
	// button 0 is [Roll back]: enter alone never keeps by accident
	keep := msg.String() == "k" || (msg.String() == "enter" && m.btn == 1)
	back := msg.String() == "b" || msg.String() == "esc" || (msg.String() == "enter" && m.btn == 0)
	if (keep || back) && !m.mayWrite() {
		return nil
	}
	switch {
	case keep:
		return m.confirmCmd()
	case back:
		return m.rollbackCmd()
	}
	return nil
}

func (m *Model) nicsKey(msg tea.KeyPressMsg) tea.Cmd {
	switch {
	case msg.String() == "esc":
		m.mode = modeMain
	case key.Matches(msg, keyUp):
		m.nicSel = max(m.nicSel-1, 0)
	case key.Matches(msg, keyDown):
		m.nicSel = min(m.nicSel+1, max(len(m.nics)-1, 0))
	case msg.String() == "enter":
		if m.nicSel >= len(m.nics) {
			return nil
		}
		nic := m.nics[m.nicSel]
		base, note := m.desired, ""
		if m.fallback != nil {
			// the desired file does not load: start from what
			// `virt net reset-dhcp` would, and say so
			base, note = m.fallback, m.fallbackWhy
		}
		next, err := netcfg.ResetManagementDHCP(base, nic, m.state)
		if err != nil {
			m.mode = modeMain
			m.say(styles.Failure, "%v", err)
			return nil
		}
		m.reviewFrom(base, next, "reset the management network to DHCP on "+nic,
			"virt net reset-dhcp "+nic+tryFlag())
		if m.edit != nil && m.mode == modeDiff {
			m.edit.note = note
		}
	}
	return nil
}

// deleteKey answers the delete dialog: y goes on to the review of the
// change, any other key cancels.
func (m *Model) deleteKey(msg tea.KeyPressMsg) tea.Cmd {
	b := m.selected()
	if !common.Confirmed(msg) || b == nil {
		m.mode = modeMain
		m.say(styles.Info, "cancelled: nothing changed")
		return nil
	}
	next, err := netcfg.DeleteBridge(m.desired, b.Name)
	if err != nil {
		m.mode = modeMain
		m.say(styles.Failure, "%v", err)
		return nil
	}
	m.review(next, "delete bridge "+b.Name, "virt net bridge delete "+b.Name+tryFlag())
	return nil
}

// View draws the content area.
func (m *Model) View() tea.View { return tea.NewView(m.Render()) }

// Render is the content area: exactly h lines of w cells.
func (m *Model) Render() string {
	var lines []string
	switch m.mode {
	case modeForm:
		lines = m.form.lines(m.c.Styles, m.w)
	case modeDiff:
		lines = m.diffLines()
	case modeBusy:
		lines = m.busyLines()
	case modeKeep:
		lines = m.keepLines()
	case modeNICs:
		lines = m.nicLines()
	case modeDelete:
		lines = m.deleteLines()
	case modeResults:
		lines = m.resultLines()
	default:
		lines = m.mainLines()
	}
	return common.Fit(lines, m.w, m.h, m.c.Styles.Ellipsis)
}

func (m *Model) dots() string {
	if m.c.Styles.Ellipsis == "~" {
		return "..."
	}
	return m.c.Styles.Ellipsis
}

func (m *Model) message() string {
	if m.msg == "" {
		return ""
	}
	return m.c.Styles.Badgef(m.msgLevel) + " " + m.msg
}

const col1, col2 = 14, 30

func row(label, desired, live string) string {
	l := "  " + padRight(label, col1) + desired
	if live != "" {
		l = padRight(l, 2+col1+col2) + " " + live
	}
	return l
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (m *Model) mainLines() []string {
	s := m.c.Styles
	if !m.loaded {
		return []string{s.Muted.Render("loading" + m.dots())}
	}
	var lines []string
	if m.loadErr != nil {
		lines = append(lines, s.Badgef(styles.Failure)+" "+m.clean(m.loadErr.Error()))
	}
	lines = append(lines, padRight(s.Section.Render("MANAGEMENT"), 2+col1)+
		padRight(s.Muted.Render("wanted (network.yaml)"), col2)+" "+s.Muted.Render("live"))
	lines = append(lines, m.mgmtRows()...)
	lines = append(lines, m.bridgeHeader())
	lines = append(lines, m.bridgeRows()...)
	lines = append(lines, s.Section.Render("NETWORKS")+"  "+m.networksLine())
	lines = append(lines, s.Section.Render("TRIAL")+"     "+m.trialLine())
	if msg := m.message(); msg != "" {
		lines = append(lines, msg)
	}
	return lines
}

func (m *Model) mgmtRows() []string {
	cfg := m.desired
	if cfg == nil || cfg.Management == nil {
		return []string{"  " + m.c.Styles.Badgef(styles.Warning) + " no management interface in the file: e sets one, z resets to DHCP"}
	}
	mg := cfg.Management
	link := mg.Interface
	if mg.VLAN != 0 {
		link = fmt.Sprintf("%s.%d", mg.Interface, mg.VLAN)
	}
	var ll *netcfg.Link
	if m.state != nil {
		ll = m.state.Link(link)
	}
	liveLink, liveAddrs, liveGW, liveMTU := "missing", "-", "-", "-"
	if ll != nil {
		liveLink = "down"
		if ll.Up {
			liveLink = "up"
		}
		var as []string
		for _, a := range ll.Addresses {
			as = append(as, a.String())
		}
		liveAddrs = orDash(strings.Join(as, ", "))
		liveMTU = strconv.Itoa(ll.MTU)
		for _, r := range m.state.Routes {
			if r.IsDefault() && r.Link == link && r.Gateway.IsValid() {
				liveGW = "default via " + r.Gateway.String()
				break
			}
		}
	}
	mode, addrs, gw := "static", orDash(strings.Join(mg.Addresses, ", ")), orDash(mg.Gateway)
	if mg.DHCP {
		mode, addrs, gw = "dhcp", "(from DHCP)", "(from DHCP)"
	}
	vlan := "untagged"
	if mg.VLAN != 0 {
		vlan = "VLAN " + strconv.Itoa(mg.VLAN)
	}
	mtu := "default"
	if mg.MTU != 0 {
		mtu = strconv.Itoa(mg.MTU)
	}
	rows := []string{
		row("interface", link, liveLink),
		row("mode", mode, ""),
		row("addresses", addrs, liveAddrs),
		row("gateway", gw, liveGW),
		row("vlan / mtu", vlan+" / "+mtu, "mtu "+liveMTU),
		row("dns", orDash(strings.Join(cfg.DNS.Servers, ", ")), ""),
		row("hostname", orDash(cfg.Hostname), ""),
	}
	for i, r := range rows {
		rows[i] = m.clean(r)
	}
	return rows
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// bridgeRow lays out a bridge line: mark, name, ports, addresses, STP,
// VLAN filtering, live state.
const bridgeRow = "%s%-10s %-16s %-18s %-4s %-6s %s"

func (m *Model) bridgeHeader() string {
	s := m.c.Styles
	return padRight(s.Section.Render("BRIDGES"), 13) + s.Muted.Render(fmt.Sprintf("%-16s %-18s %-4s %-6s %s", "ports", "addresses", "stp", "vlanf", "live"))
}

func (m *Model) bridgeRows() []string {
	s := m.c.Styles
	if m.desired == nil || len(m.desired.Bridges) == 0 {
		return []string{"  " + s.Muted.Render("none in the file: a adds one")}
	}
	// keep the selection in view when the list is long
	const shown = 4
	start := 0
	if m.sel >= shown {
		start = m.sel - shown + 1
	}
	var lines []string
	for i, b := range m.desired.Bridges {
		if i < start || i >= start+shown {
			continue
		}
		mark := "  "
		if i == m.sel {
			mark = "> "
		}
		live := "missing"
		if l := m.state.Link(b.Name); l != nil {
			live = "down"
			if l.Up {
				live = "up"
			}
		}
		l := m.clean(fmt.Sprintf(bridgeRow, mark, b.Name, orDash(strings.Join(b.Ports, ",")), orDash(strings.Join(b.Addresses, ",")),
			onOff(b.STP), onOff(b.VLANFiltering), live))
		if i == m.sel {
			l = s.Selected.Render(l)
		}
		lines = append(lines, l)
	}
	if n := len(m.desired.Bridges); n > shown {
		lines = append(lines, s.Muted.Render(fmt.Sprintf("  (%d-%d of %d, up/down)", start+1, min(start+shown, n), n)))
	}
	return lines
}

func (m *Model) networksLine() string {
	if m.desired == nil || len(m.desired.Networks) == 0 {
		return "none"
	}
	var parts []string
	for _, n := range m.desired.Networks {
		p := fmt.Sprintf("%s (%s on %s", n.Name, n.Type, n.Bridge)
		if n.Subnet != "" {
			p += " " + n.Subnet
		}
		parts = append(parts, p+")")
	}
	return m.clean(strings.Join(parts, ", "))
}

func (m *Model) trialLine() string {
	s := m.c.Styles
	if m.pending == nil {
		return "no change on trial"
	}
	return s.Badgef(styles.Warning) + " change on trial: rolls back in " + clock(m.pending.Remaining(m.c.Now())) + " (c keep, b roll back)"
}

// tryFlag is the --try flag of the CLI lines.
func tryFlag() string { return fmt.Sprintf(" --try %ds", int(TryFor/time.Second)) }

// clock formats a countdown as m:ss.
func clock(d time.Duration) string {
	d = d.Round(time.Second)
	return fmt.Sprintf("%d:%02d", int(d.Minutes()), int(d.Seconds())%60)
}

// listSection is a heading and at most room lines of items, long items
// wrapped, and "... and N more" when they do not fit.
func (m *Model) listSection(title string, items []string, room int) []string {
	lines := []string{m.c.Styles.Section.Render(title)}
	used := 0
	for i, it := range items {
		w := wrap("  "+m.clean(it), m.w, "     ")
		if used+len(w) > room || (used+len(w) == room && i < len(items)-1) {
			lines = append(lines, m.c.Styles.Muted.Render(fmt.Sprintf("  %s and %d more", m.dots(), len(items)-i)))
			break
		}
		lines = append(lines, w...)
		used += len(w)
	}
	return lines
}

func (m *Model) diffLines() []string {
	s := m.c.Styles
	e := m.edit
	lines := []string{s.Title.Render("Review: " + e.what)}
	// 17 lines: title, two sections, blank, question, buttons
	room := max(m.h-6, 4)
	if e.note != "" {
		badge := s.Badgef(styles.Warning) + " "
		note := wrap(badge+m.clean(e.note), m.w, strings.Repeat(" ", lipgloss.Width(badge)))
		if len(note) > 3 {
			note = note[:3]
		}
		lines = append(lines, note...)
		room = max(room-len(note), 4)
	}
	diffRoom := min(len(e.diff), max(room/2, room-len(e.steps)))
	diff := e.diff
	if len(diff) == 0 {
		diff = []string{s.Muted.Render("(the file is unchanged; the host differs from it)")}
	}
	lines = append(lines, m.listSection("Changes to "+m.opts.DesiredFile, diff, max(diffRoom, 1))...)
	steps := make([]string, len(e.steps))
	for i, st := range e.steps {
		steps[i] = fmt.Sprintf("%d. %s", i+1, st)
	}
	if len(steps) == 0 {
		steps = []string{s.Muted.Render("(no link changes; DNS, host name or DHCP only)")}
	}
	lines = append(lines, m.listSection("Steps on the host", steps, max(room-diffRoom, 1))...)
	lines = append(lines, "",
		fmt.Sprintf("Apply with a %d s trial? It rolls back by itself unless you keep it.", int(TryFor/time.Second)),
		common.ConfirmPrompt(s, "apply it on trial"))
	return lines
}

// button draws a dialog button, marked when focused: brackets and an
// arrow, so it shows without colour.
func (m *Model) button(label string, idx int) string {
	if m.btn == idx {
		return m.c.Styles.Selected.Render("[>" + label + "<]")
	}
	return "[ " + label + " ]"
}

func (m *Model) busyLines() []string {
	what := "the change"
	if m.edit != nil {
		what = m.edit.what
	}
	return []string{
		m.c.Styles.Title.Render("Applying on trial: " + what),
		"",
		"Applying, then checking the links, addresses and gateway" + m.dots(),
		fmt.Sprintf("This takes up to %d s. If it fails, the previous settings come back at once.", int(TryFor/2/time.Second)),
	}
}

func (m *Model) keepLines() []string {
	s := m.c.Styles
	p := m.pending
	left := p.Remaining(m.c.Now())
	count := "Rolling back in " + clock(left)
	if left == 0 {
		count = "Rolling back now" + m.dots()
	}
	body := []string{
		s.Title.Render("Keep these network settings?"),
		"",
		s.Badgef(styles.Warning) + " " + s.Title.Render(count),
		"",
		"The new settings are on trial. If you do nothing, the",
		"previous settings come back at " + p.Deadline.In(m.c.Now().Location()).Format("15:04:05") + ".",
		"",
	}
	if m.c.Session.CanWrite() {
		body = append(body, m.button("Roll back", 0)+"   "+m.button("Keep", 1), "",
			s.Muted.Render("k keep   b/esc roll back now"))
	} else {
		body = append(body, s.Muted.Render(m.c.Session.ReadOnlyReason()+":"), s.Muted.Render("only the console holding the lock can keep it."))
	}
	if m.acting {
		body = append(body, "", "working"+m.dots())
	}
	box := s.Frame.Padding(0, 2).Render(strings.Join(body, "\n"))
	out := strings.Split(lipgloss.Place(m.w, m.h-1, lipgloss.Center, lipgloss.Center, box), "\n")
	if msg := m.message(); msg != "" {
		out = append(out, msg)
	}
	return out
}

func (m *Model) nicLines() []string {
	s := m.c.Styles
	lines := []string{s.Title.Render("Reset the management network to DHCP"), "",
		"Pick the NIC that gets the host's address by DHCP. Bridges and VM networks",
		"stay; the static address, gateway and VLAN go. The change is on trial.", ""}
	if m.nics == nil {
		return append(lines, s.Muted.Render("  listing NICs"+m.dots()))
	}
	if len(m.nics) == 0 {
		return append(lines, "  "+s.Badgef(styles.Warning)+" no physical NICs found", "", s.Muted.Render("esc goes back"))
	}
	for i, n := range m.nics {
		mark := "  "
		if i == m.nicSel {
			mark = "> "
		}
		info := ""
		if l := m.state.Link(n); l != nil {
			info = "down"
			if l.Up {
				info = "up"
			}
			for _, a := range l.Addresses {
				info += "  " + a.String()
			}
			if l.Master != "" {
				info += "  (port of " + l.Master + ")"
			}
		}
		if n == m.mgmtInterface() {
			info += "  (management now)"
		}
		l := m.clean(fmt.Sprintf("%s%-12s %s", mark, n, info))
		if i == m.nicSel {
			l = s.Selected.Render(l)
		}
		lines = append(lines, l)
	}
	return lines
}

func (m *Model) deleteLines() []string {
	s := m.c.Styles
	b := m.selected()
	if b == nil {
		return nil
	}
	return []string{
		s.Badgef(styles.Warning) + " " + s.Title.Render("Delete bridge "+m.clean(b.Name)+"?"), "",
		"It is removed from the host and from network.yaml; its ports are released.",
		"VMs attached to it lose their network. You review the change next.", "",
		common.ConfirmPrompt(s, "delete it and review the change"),
	}
}

func (m *Model) resultLines() []string {
	s := m.c.Styles
	lines := []string{s.Title.Render("Test management network"), ""}
	if m.testing && m.results == nil {
		return append(lines, s.Muted.Render("  testing"+m.dots()))
	}
	for _, r := range m.results {
		lvl := styles.OK
		if !r.OK {
			lvl = styles.Failure
		}
		lines = append(lines, s.Badgef(lvl)+" "+m.clean(fmt.Sprintf("%-30s %s", r.Name, r.Detail)))
	}
	lines = append(lines, "")
	if netcfg.AllPassed(m.results) {
		lines = append(lines, s.Badgef(styles.OK)+" the management network works")
	} else {
		lines = append(lines, s.Badgef(styles.Failure)+" the management network has a problem: see FAIL above")
	}
	return append(lines, s.Muted.Render("t tests again; esc or enter closes"))
}
