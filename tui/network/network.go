package network

import (
	"errors"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/styles"
)

// TryFor is how long a change from this screen is on trial before the
// watchdog rolls it back.
const TryFor = 60 * time.Second

// Timeouts of the screen's host calls.
const (
	loadTimeout = 10 * time.Second
	// applySlack is how long an apply on trial may take beyond its
	// trial: apply and verify end before the deadline.
	applySlack = 30 * time.Second
	// maxTry is the longest trial an apply may grow to (AtLeast): STP's
	// forward delay is at most 30 s, so a change needs at most 2 × 30 s
	// plus the core's margin.
	maxTry = 60*time.Second + netcfg.TryMargin
	// testTimeout covers CheckManagement, whose checks run at once.
	testTimeout = 2*netcfg.DefaultCheckTimeout + 5*time.Second
	// reloadEvery is the period of the background reload, in ticks.
	reloadEvery = 5
)

// Options configure the screen.
type Options struct {
	// DesiredFile is network.yaml as the CLI line names it; default
	// /etc/virtcon/network.yaml.
	DesiredFile string
}

// mode is the part of the screen in front.
type mode int

const (
	modeMain    mode = iota // the overview
	modeForm                // an edit form
	modeDiff                // the review of a change, asking to apply it on trial
	modeBusy                // the trial apply runs
	modeKeep                // "keep these settings?" with the countdown
	modeNICs                // pick the NIC for a DHCP reset
	modeDelete              // confirm deleting a bridge
	modeResults             // the management network test
)

// Model is the Network screen. It composes one part per mode (see part):
// it loads the files and the host, follows the try on trial, routes keys
// to the part in front and does what that part asks.
type Model struct {
	shared
	src  Sources
	w, h int

	mode    mode
	loading bool
	polling bool
	ticks   int
	// tryOld is the applied configuration before the try on trial, to
	// tell a rollback from a confirm when the try ends elsewhere.
	tryOld *netcfg.Config

	// overview and results live as long as the screen; the other parts
	// while their mode is on.
	overview *overview
	results  *results
	form     *formView
	review   *review
	busy     *busy
	keep     *keepDialog
	nics     *nicPicker
	del      *deleteDialog
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
	m := &Model{shared: shared{c: c, opts: opts, keys: DefaultKeyMap()}, src: src}
	m.overview = newOverview(&m.shared)
	m.results = &results{shared: &m.shared, overview: m.overview}
	m.SetSize(76, 17)
	return m
}

// Title names the screen.
func (m *Model) Title() string { return "Network" }

// PendingTry is the network change on trial as the screen knows it (at
// once for one it started), nil when none: the app asks before quitting
// while one is.
func (m *Model) PendingTry() *netcfg.Pending { return m.pending }

// part is the part in front.
func (m *Model) part() part {
	switch m.mode {
	case modeForm:
		return m.form
	case modeDiff:
		return m.review
	case modeBusy:
		return m.busy
	case modeKeep:
		return m.keep
	case modeNICs:
		return m.nics
	case modeDelete:
		return m.del
	case modeResults:
		return m.results
	}
	return m.overview
}

// SetSize lays the content area out for w x h.
func (m *Model) SetSize(w, h int) {
	m.w, m.h = max(w, 1), max(h, 1)
	for _, p := range []part{m.overview, m.results} {
		p.SetSize(m.w, m.h)
	}
	if m.mode != modeMain && m.mode != modeResults {
		m.part().SetSize(m.w, m.h)
	}
}

// Capturing reports that a form or a dialog takes every key. The keep
// dialog of a read-only console does not: it can only watch.
func (m *Model) Capturing() bool { return m.part().Capturing() }

// ShortHelp is the key legend of the part in front; each fits one
// 76-column line.
func (m *Model) ShortHelp() []key.Binding { return m.part().ShortHelp() }

// FullHelp is every key of the screen, by mode.
func (m *Model) FullHelp() [][]key.Binding { return m.keys.FullHelp() }

// CLI is the virt command for what the screen shows or is about to do.
func (m *Model) CLI() string { return m.part().CLI() }

// Init does nothing: the screen loads on ActivateMsg.
func (m *Model) Init() tea.Cmd { return nil }

// show brings p, the part of md, to the front.
func (m *Model) show(md mode, p part) {
	p.SetSize(m.w, m.h)
	m.mode = md
}

// toOverview brings the overview back, dropping the parts of the modes
// it ends.
func (m *Model) toOverview() {
	m.mode = modeMain
	m.form, m.review, m.busy, m.keep, m.nics, m.del = nil, nil, nil, nil, nil, nil
}

// do carries out what a part asked for.
func (m *Model) do(in intent) tea.Cmd {
	switch in := in.(type) {
	case toOverview:
		m.toOverview()
	case openForm:
		if in.kind == formManagement {
			m.form = newManagementForm(&m.shared)
		} else {
			m.form = newBridgeForm(&m.shared, in.bridge)
		}
		m.show(modeForm, m.form)
	case openDelete:
		m.del = &deleteDialog{shared: &m.shared, name: in.name}
		m.show(modeDelete, m.del)
	case openNICs:
		m.nics = &nicPicker{shared: &m.shared}
		m.show(modeNICs, m.nics)
		return m.nicsCmd()
	case toReview:
		e := newEdit(&m.shared, in)
		if e == nil {
			m.toOverview()
			m.say(styles.Info, "no change: the file and the host already match")
			return nil
		}
		m.form, m.review = nil, &review{shared: &m.shared, edit: e}
		m.show(modeDiff, m.review)
	case applyChange:
		m.review, m.busy = nil, &busy{shared: &m.shared, edit: in.edit}
		m.show(modeBusy, m.busy)
		m.log("apply on trial", "what", in.edit.what)
		return m.applyCmd(in.edit)
	case runTest:
		if in.fresh {
			m.results.results = nil
			m.show(modeResults, m.results)
		}
		return m.testCmd()
	case keepTrial:
		return m.confirmCmd()
	case rollBack:
		return m.rollbackCmd()
	}
	return nil
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
		m.overview.clamp()
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
			m.log("keep failed", "err", msg.err)
			m.say(styles.Failure, "%s", m.wordKeep(msg.err))
			if errors.Is(msg.err, netcfg.ErrNoPendingTry) {
				m.pending = nil
				m.toOverview()
			}
			return m, m.load()
		}
		m.log("try confirmed")
		m.pending = nil
		m.toOverview()
		m.say(styles.OK, "kept: the new settings are in %s", m.opts.DesiredFile)
		return m, m.load()
	case rolledBackMsg:
		m.acting = false
		if msg.err != nil {
			m.log("roll back failed", "err", msg.err)
			m.say(styles.Failure, "%s", m.wordRollback(msg.err))
			if errors.Is(msg.err, netcfg.ErrNoPendingTry) {
				m.pending = nil
				m.toOverview()
			}
			return m, m.load()
		}
		m.log("try rolled back")
		m.pending = nil
		m.toOverview()
		m.say(styles.Warning, "rolled back: the previous settings are restored")
		return m, m.load()
	case testedMsg:
		m.results.testing = false
		m.results.results = msg.results
	case nicsMsg:
		if msg.err != nil {
			m.say(styles.Failure, "cannot list NICs: %v", msg.err)
			m.toOverview()
			break
		}
		if m.mode == modeNICs {
			m.nics.listed(msg.nics)
		}
	case tea.KeyPressMsg:
		next, cmd := m.part().Update(msg)
		return m, tea.Batch(cmd, m.do(next))
	}
	return m, nil
}

// finishApply handles the end of a trial apply.
func (m *Model) finishApply(msg appliedMsg) tea.Cmd {
	if m.mode == modeBusy {
		m.toOverview()
	}
	if msg.err != nil {
		m.log("apply failed", "err", msg.err, "try", msg.try)
		m.say(styles.Failure, "%s", m.wordApply(msg.err, msg.try, msg.cli))
		if msg.pending != nil {
			// on trial all the same (it cannot be kept): the dialog,
			// whose b rolls it back, at once
			m.setPending(msg.pending)
		}
		return m.load()
	}
	m.log("try started", "deadline", msg.pending.Deadline, "try", msg.try)
	m.msg = ""
	if msg.longer != nil {
		m.say(styles.Warning, "%s", wordLongerTry(msg.try, msg.longer))
	}
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
			m.busy, m.keep = nil, &keepDialog{shared: &m.shared}
			m.show(modeKeep, m.keep)
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
		m.toOverview()
	}
	if sameConfig(applied, m.tryOld) {
		m.say(styles.Warning, "rolled back: the trial ended unconfirmed; the previous settings are restored")
	} else {
		m.say(styles.OK, "kept: the trial was confirmed elsewhere")
	}
}

func sameConfig(a, b *netcfg.Config) bool { return len(netcfg.DiffConfigs(a, b)) == 0 }

// View draws the content area.
func (m *Model) View() tea.View { return tea.NewView(m.Render()) }

// Render is the content area: exactly h lines of w cells.
func (m *Model) Render() string {
	return common.Fit(m.part().Lines(), m.w, m.h, m.c.Styles.Ellipsis)
}
