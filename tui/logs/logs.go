package logs

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/keys"
	"github.com/virtcon/virtcon/tui/styles"
	"github.com/virtcon/virtcon/tui/term"
)

const (
	loadTimeout = 10 * time.Second
	relistEvery = 10 // ticks
	maxQuery    = 200
)

type (
	listMsg struct {
		files []LogFile
		err   error
	}
	// readMsg is a file's tail, already split and cleaned in the read's
	// Cmd: cleaning a MiB of log costs ~15 ms, too much for Update
	readMsg struct {
		path       string
		lines, raw []string
		err        error
	}
)

// KeyMap is the screen's own bindings; none uses a globally reserved letter.
type KeyMap struct {
	NextFile, PrevFile                    key.Binding
	Up, Down, PageUp, PageDown, Home, End key.Binding
	Follow, Search, NextMatch, PrevMatch  key.Binding
	// the search box's
	SearchEnter, SearchCancel key.Binding
}

var _ keys.Map = KeyMap{}

// DefaultKeyMap returns the screen's bindings.
func DefaultKeyMap() KeyMap {
	return KeyMap{
		NextFile:  keys.On("tab").Help("tab", "next file"),
		PrevFile:  keys.On("shift+tab").Help("S-tab", "prev file"),
		Up:        keys.On("up", "k").Help("up/k", "scroll up"),
		Down:      keys.On("down", "j").Help("dn/j", "scroll down"),
		PageUp:    keys.On("pgup").Help("pgup", "page up"),
		PageDown:  keys.On("pgdown").Help("pgdn", "page down"),
		Home:      keys.On("home").Help("home", "top"),
		End:       keys.On("end").Help("end", "bottom"),
		Follow:    keys.On("f").Help("f", "follow"),
		Search:    keys.On("/").Help("/", "search"),
		NextMatch: keys.On("o").Help("o", "next match"),
		PrevMatch: keys.On("u").Help("u", "prev match"),

		SearchEnter:  keys.On("enter").Help("enter", "search"),
		SearchCancel: keys.On("esc").Help("esc", "cancel"),
	}
}

// ShortHelp is the legend of the file view; it fits one 76-column line
// (FullHelp has the rest).
func (k KeyMap) ShortHelp() []key.Binding {
	return []key.Binding{k.NextFile, k.Search, k.NextMatch, k.PrevMatch, k.Follow, k.End}
}

// FullHelp is the screen's help.
func (k KeyMap) FullHelp() [][]key.Binding {
	return [][]key.Binding{
		{k.NextFile, k.PrevFile, k.Follow, k.Search, k.NextMatch, k.PrevMatch},
		{k.Up, k.Down, k.PageUp, k.PageDown, k.Home, k.End},
	}
}

// Model is the logs screen.
type Model struct {
	c    common.Common
	src  Sources
	keys KeyMap

	files   []LogFile
	listed  bool
	listErr error
	listing bool
	ticks   int
	sel     int // selected file
	pickTop int // first picker row shown

	path       string   // the file lines belong to
	lines      []string // cleaned content of path, as shown
	raw        []string // the line as written where lines shows it otherwise (JSON), else ""; nil for none
	readErr    error
	reading    bool
	readQueued bool
	fresh      bool // the next read of path is its first: show its end
	top        int  // first line shown; long lines wrap
	follow     bool

	searching bool
	input     []rune
	query     string
	matches   []int // line numbers
	cur       int   // index into matches, -1 before the first jump

	msg string
}

var _ common.Screen = (*Model)(nil)

// New returns the logs screen.
func New(c common.Common, src Sources) *Model {
	if c.Styles == nil {
		c.Styles = styles.New(c.Tier)
	}
	m := &Model{c: c, src: src, keys: DefaultKeyMap(), cur: -1}
	m.SetSize(c.Width, c.Height)
	return m
}

// SetSize lays the content area out for w x h cells.
func (m *Model) SetSize(w, h int) {
	if w <= 0 || h <= 0 {
		w, h = term.Size(w, h)
	}
	m.c.Width, m.c.Height = w, h
	m.clampTop()
}

// Title names the screen.
func (m *Model) Title() string { return "Logs" }

// Capturing reports that the search box takes every key.
func (m *Model) Capturing() bool { return m.searching }

// ShortHelp is the screen's part of the key legend; it fits one
// 76-column line (FullHelp has the rest).
func (m *Model) ShortHelp() []key.Binding {
	if m.searching {
		return []key.Binding{m.keys.SearchEnter, m.keys.SearchCancel}
	}
	return m.keys.ShortHelp()
}

// FullHelp is the screen's help.
func (m *Model) FullHelp() [][]key.Binding { return m.keys.FullHelp() }

// CLI is the shell command that shows the selected log.
func (m *Model) CLI() string {
	f, ok := m.selected()
	switch {
	case !ok:
		return ""
	case f.VM != "" && m.follow:
		return "virt vm logs -f " + common.ShellQuote(f.VM)
	case f.VM != "":
		return "virt vm logs " + common.ShellQuote(f.VM)
	case m.follow:
		return "tail -f " + common.ShellQuote(f.Path)
	}
	return "less " + common.ShellQuote(f.Path)
}

// Init loads nothing: the app sends ActivateMsg when the screen shows.
func (m *Model) Init() tea.Cmd { return nil }

func (m *Model) selected() (LogFile, bool) {
	if m.sel < 0 || m.sel >= len(m.files) {
		return LogFile{}, false
	}
	return m.files[m.sel], true
}

func (m *Model) list() tea.Cmd {
	if m.listing || m.src.List == nil {
		return nil
	}
	m.listing = true
	f, parent := m.src.List, m.c.Ctx
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(parent, loadTimeout)
		defer cancel()
		files, err := f(ctx)
		return listMsg{files, err}
	}
}

func (m *Model) read() tea.Cmd {
	f, ok := m.selected()
	if !ok || m.src.Read == nil {
		return nil
	}
	if m.reading {
		m.readQueued = true
		return nil
	}
	m.reading = true
	read, path, ascii, parent := m.src.Read, f.Path, m.c.Tier == term.Plain, m.c.Ctx
	// virtcon's own logs may be JSON lines, shown readably; a guest's
	// serial console is shown as the guest wrote it
	structured := f.VM == ""
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(parent, loadTimeout)
		defer cancel()
		data, err := read(ctx, path, MaxRead)
		if err != nil {
			return readMsg{path: path, err: err}
		}
		lines, raw := cleanLog(data, ascii, structured)
		return readMsg{path: path, lines: lines, raw: raw}
	}
}

// textRows is how many rows of log text show: the area less the viewer's
// title and the status line.
func (m *Model) textRows() int { return max(m.c.Height-2, 1) }

// leftW is the picker's width; textW the log text's, after the separator
// and the match gutter.
func (m *Model) leftW() int { return min(18, max(m.c.Width/5, 10)) }
func (m *Model) textW() int { return max(m.c.Width-m.leftW()-2, 1) }

// wrapped is line i cut into rows of textW cells (at spaces where it can),
// at most a screenful.
func (m *Model) wrapped(i int) []string {
	l := m.lines[i]
	tw, rows := m.textW(), m.textRows()
	if ansi.StringWidth(l) <= tw {
		return []string{l}
	}
	if ansi.StringWidth(l) > tw*rows {
		l = ansi.Truncate(l, tw*rows, "")
	}
	return strings.Split(ansi.Wrap(l, tw, ""), "\n")
}

func (m *Model) height(i int) int { return len(m.wrapped(i)) }

// maxTop is the top line that shows the end of the file.
func (m *Model) maxTop() int {
	h := 0
	for i := len(m.lines) - 1; i >= 0; i-- {
		h += m.height(i)
		if h > m.textRows() {
			return i + 1
		}
	}
	return 0
}

// shown is the line after the last one on screen.
func (m *Model) shown() int {
	end, _ := m.page()
	return end
}

// page returns the line after the last one on screen and whether that
// last one is cut off at the bottom.
func (m *Model) page() (end int, cut bool) {
	h, i := 0, m.top
	for ; i < len(m.lines) && h < m.textRows(); i++ {
		h += m.height(i)
	}
	return i, h > m.textRows()
}

// nextPage is the top line of the page below: the cut-off line, if any,
// shows whole at its top.
func (m *Model) nextPage() int {
	end, cut := m.page()
	if cut {
		end--
	}
	return max(end, m.top+1)
}

// back is the top line that puts line at least rows rows down.
func (m *Model) back(line, rows int) int {
	h := 0
	for line > 0 && h+m.height(line-1) <= rows {
		line--
		h += m.height(line)
	}
	return line
}

func (m *Model) clampTop() { m.top = min(max(m.top, 0), m.maxTop()) }

// Update handles keys and results. It never waits on the host.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case common.ActivateMsg, common.RefreshMsg:
		return m, tea.Batch(m.list(), m.read())
	case common.TickMsg:
		m.ticks++
		var cmds []tea.Cmd
		if m.follow && !m.reading {
			cmds = append(cmds, m.read())
		}
		if m.ticks%relistEvery == 0 {
			cmds = append(cmds, m.list())
		}
		return m, tea.Batch(cmds...)
	case listMsg:
		return m, m.listed1(msg)
	case readMsg:
		m.reading = false
		var cmd tea.Cmd
		if m.readQueued {
			m.readQueued = false
			cmd = m.read()
		}
		if f, ok := m.selected(); ok && f.Path == msg.path {
			m.loaded(msg)
		}
		return m, cmd
	case tea.PasteMsg:
		if m.searching {
			m.typed(strings.ReplaceAll(msg.Content, "\n", " "))
		}
	case tea.KeyPressMsg:
		if m.searching {
			m.searchKey(msg)
			return m, nil
		}
		return m, m.key(msg)
	}
	return m, nil
}

func (m *Model) listed1(msg listMsg) tea.Cmd {
	m.listing, m.listed = false, true
	m.listErr = msg.err
	if msg.err != nil && m.c.Logger != nil {
		m.c.Logger.Warn("logs: list", "err", msg.err)
	}
	if msg.files == nil && msg.err != nil {
		return nil
	}
	old, had := m.selected()
	m.files = msg.files
	m.sel = 0
	for i, f := range m.files {
		if had && f.Path == old.Path {
			m.sel = i
		}
	}
	f, ok := m.selected()
	if !ok {
		m.path, m.lines = "", nil
		return nil
	}
	if f.Path != m.path {
		m.open()
		return m.read()
	}
	return nil
}

// open switches the view to the selected file; its lines come with the read.
func (m *Model) open() {
	f, _ := m.selected()
	m.path, m.lines, m.raw, m.readErr = f.Path, nil, nil, nil
	m.top, m.fresh = 0, true
	m.matches, m.cur = nil, -1
	m.msg = ""
}

func (m *Model) loaded(msg readMsg) {
	m.readErr = msg.err
	if msg.err != nil {
		m.lines, m.raw = nil, nil
		if m.c.Logger != nil {
			m.c.Logger.Warn("logs: read", "path", msg.path, "err", msg.err)
		}
		return
	}
	atEnd := m.top >= m.maxTop()
	m.lines, m.raw = msg.lines, msg.raw
	if m.query != "" {
		m.findMatches()
	}
	if m.fresh || m.follow || (atEnd && m.top > 0) {
		m.top = m.maxTop()
	}
	m.fresh = false
	m.clampTop()
}

func (m *Model) key(msg tea.KeyPressMsg) tea.Cmd {
	k := m.keys
	switch {
	case key.Matches(msg, k.NextFile), key.Matches(msg, k.PrevFile):
		if len(m.files) == 0 {
			return nil
		}
		d := 1
		if key.Matches(msg, k.PrevFile) {
			d = len(m.files) - 1
		}
		m.sel = (m.sel + d) % len(m.files)
		m.open()
		return m.read()
	case key.Matches(msg, k.Up):
		m.scroll(-1)
	case key.Matches(msg, k.Down):
		m.scroll(1)
	case key.Matches(msg, k.PageUp):
		m.scroll(min(m.back(m.top, m.textRows()), m.top-1) - m.top)
	case key.Matches(msg, k.PageDown):
		m.scroll(m.nextPage() - m.top)
	case key.Matches(msg, k.Home):
		m.scroll(-len(m.lines))
	case key.Matches(msg, k.End):
		m.top = m.maxTop()
	case key.Matches(msg, k.Follow):
		m.follow = !m.follow
		if m.follow {
			m.top = m.maxTop()
			return m.read()
		}
	case key.Matches(msg, k.Search):
		m.searching, m.input = true, []rune(m.query)
	case key.Matches(msg, k.NextMatch):
		m.step(1)
	case key.Matches(msg, k.PrevMatch):
		m.step(-1)
	case msg.String() == "esc":
		m.query, m.matches, m.cur, m.msg = "", nil, -1, ""
	}
	return nil
}

// scroll moves the view; moving up leaves follow mode, as in less.
func (m *Model) scroll(n int) {
	if n < 0 && m.top > 0 {
		m.follow = false
	}
	m.top += n
	m.clampTop()
}

func (m *Model) searchKey(msg tea.KeyPressMsg) {
	switch msg.String() {
	case "esc":
		m.searching, m.input = false, nil
	case "enter":
		m.searching = false
		m.query = strings.TrimSpace(string(m.input))
		m.input = nil
		m.search()
	case "backspace", "ctrl+h":
		if len(m.input) > 0 {
			m.input = m.input[:len(m.input)-1]
		}
	case "ctrl+u":
		m.input = nil
	default:
		if msg.Text != "" {
			m.typed(msg.Text)
		}
	}
}

func (m *Model) typed(s string) {
	for _, r := range s {
		if unicode.IsPrint(r) && len(m.input) < maxQuery {
			m.input = append(m.input, r)
		}
	}
}

// search finds the query and jumps to the first match at or below the top
// of the view.
func (m *Model) search() {
	m.matches, m.cur, m.msg = nil, -1, ""
	if m.query == "" {
		return
	}
	m.findMatches()
	if len(m.matches) == 0 {
		m.msg = m.c.Styles.Badgef(styles.Warning) + " no match for " + m.clean(m.query)
		return
	}
	m.cur = 0
	for i, l := range m.matches {
		if l >= m.top {
			m.cur = i
			break
		}
	}
	m.show()
}

func (m *Model) findMatches() {
	q := strings.ToLower(m.query)
	m.matches = m.matches[:0]
	for i, l := range m.lines {
		// what is shown, or the line as written (a JSON key in quotes)
		if strings.Contains(strings.ToLower(l), q) || (i < len(m.raw) && m.raw[i] != "" && strings.Contains(strings.ToLower(m.raw[i]), q)) {
			m.matches = append(m.matches, i)
		}
	}
	if m.cur >= len(m.matches) {
		m.cur = len(m.matches) - 1
	}
}

// step moves to the next (d=1) or previous (d=-1) match, wrapping.
func (m *Model) step(d int) {
	if len(m.matches) == 0 {
		if m.query != "" {
			m.msg = m.c.Styles.Badgef(styles.Warning) + " no match for " + m.clean(m.query)
		} else {
			m.msg = m.c.Styles.Badgef(styles.Info) + " no search: press / first"
		}
		return
	}
	if m.cur < 0 {
		m.cur = 0
	} else {
		m.cur = (m.cur + d + len(m.matches)) % len(m.matches)
	}
	m.show()
}

// show puts the current match a third of the way down the view.
func (m *Model) show() {
	line := m.matches[m.cur]
	if line < m.top || line >= m.shown() {
		m.top = m.back(line, m.textRows()/3)
	}
	m.clampTop()
	m.follow = false
}

// clean makes host text (file names, errors, the query) safe to draw.
func (m *Model) clean(s string) string { return common.Clean(s, m.c.Tier == term.Plain) }

// View draws the content area.
func (m *Model) View() tea.View { return tea.NewView(m.Render()) }

// Render is the content area: exactly Height lines of Width cells.
func (m *Model) Render() string {
	s := m.c.Styles
	w, h := m.c.Width, m.c.Height
	leftW := m.leftW()
	rightW := max(w-leftW-1, 1)
	rows := h - 1
	left := m.pickerLines(rows)
	right := m.viewerLines(rightW)
	sep := s.Muted.Render(s.Border.Left)
	lines := make([]string, 0, h)
	for i := 0; i < rows; i++ {
		var l, r string
		if i < len(left) {
			l = left[i]
		}
		if i < len(right) {
			r = right[i]
		}
		lines = append(lines, m.cell(l, leftW)+sep+m.cell(r, rightW))
	}
	lines = append(lines, m.statusLine())
	return common.Fit(lines, w, h, s.Ellipsis)
}

// cell pads or truncates styled text to exactly n cells.
func (m *Model) cell(s string, n int) string {
	if ansi.StringWidth(s) > n {
		s = ansi.Truncate(s, n, m.c.Styles.Ellipsis)
	}
	return s + strings.Repeat(" ", max(n-ansi.StringWidth(s), 0))
}

// pickerLines lists the files under two headings, scrolled so the selected
// one shows.
func (m *Model) pickerLines(rows int) []string {
	s := m.c.Styles
	switch {
	case !m.listed:
		return []string{s.Section.Render("LOGS"), s.Muted.Render("loading" + dots(s))}
	case len(m.files) == 0:
		return []string{s.Section.Render("LOGS"), s.Muted.Render("(none)")}
	}
	type row struct {
		text string
		file int // -1 for a heading
	}
	var all []row
	section := ""
	for i, f := range m.files {
		want := "VIRTCON"
		if f.VM != "" {
			want = "VM SERIAL"
		}
		if want != section {
			section = want
			all = append(all, row{s.Section.Render(section), -1})
		}
		text := "  " + m.clean(f.Name)
		if i == m.sel {
			text = s.Selected.Render("> " + m.clean(f.Name))
		}
		all = append(all, row{text, i})
	}
	selRow := 0
	for i, r := range all {
		if r.file == m.sel {
			selRow = i
		}
	}
	if selRow < m.pickTop {
		m.pickTop = max(selRow-1, 0) // keep its heading in view when there is one
	}
	if selRow >= m.pickTop+rows {
		m.pickTop = selRow - rows + 1
	}
	m.pickTop = min(max(m.pickTop, 0), max(len(all)-rows, 0))
	var out []string
	for _, r := range all[m.pickTop:min(m.pickTop+rows, len(all))] {
		out = append(out, r.text)
	}
	return out
}

// viewerLines is the file's title and its visible lines, each with a
// gutter: '>' on lines that match the search.
func (m *Model) viewerLines(w int) []string {
	s := m.c.Styles
	f, ok := m.selected()
	switch {
	case !ok && m.listErr != nil:
		return []string{"", " " + s.Badgef(styles.Failure) + " " + m.clean(m.listErr.Error())}
	case !ok && m.listed:
		return []string{"", " No log files yet: virtcon writes them here as it runs."}
	case !ok:
		return nil
	}
	title := m.clean(f.Name)
	if f.VM != "" {
		title += " serial console"
	}
	if f.Size > MaxRead {
		title += fmt.Sprintf(" (last 1 MiB of %.1f MiB)", float64(f.Size)/(1<<20))
	}
	out := []string{" " + s.Muted.Render(title)}
	switch {
	case m.readErr != nil:
		return append(out, " "+s.Badgef(styles.Failure)+" "+m.clean(m.readErr.Error()))
	case m.lines == nil && m.fresh:
		return append(out, " "+s.Muted.Render("loading"+dots(s)))
	case len(m.lines) == 0:
		return append(out, " "+s.Muted.Render("(empty)"))
	}
	match := map[int]bool{}
	for _, l := range m.matches {
		match[l] = true
	}
	curLine := -1
	if m.cur >= 0 && m.cur < len(m.matches) {
		curLine = m.matches[m.cur]
	}
	for i := m.top; i < len(m.lines) && len(out) <= m.textRows(); i++ {
		for j, seg := range m.wrapped(i) {
			gutter := " "
			if match[i] {
				seg = m.highlight(seg)
				if j == 0 {
					gutter = ">"
				}
			}
			if i == curLine && j == 0 {
				gutter = s.Selected.Render(gutter)
			}
			out = append(out, gutter+seg)
		}
	}
	return out[:min(len(out), m.textRows()+1)]
}

// highlight marks every occurrence of the query in seg.
func (m *Model) highlight(seg string) string {
	lower := strings.ToLower(seg)
	q := strings.ToLower(m.query)
	if q == "" || len(lower) != len(seg) {
		return seg // case folding changed the byte offsets: the gutter still marks it
	}
	st := m.c.Styles.Match
	var b strings.Builder
	for {
		i := strings.Index(lower, q)
		if i < 0 {
			break
		}
		b.WriteString(seg[:i])
		b.WriteString(st.Render(seg[i : i+len(q)]))
		seg, lower = seg[i+len(q):], lower[i+len(q):]
	}
	b.WriteString(seg)
	return b.String()
}

func (m *Model) statusLine() string {
	s := m.c.Styles
	if m.searching {
		return s.Section.Render("/") + m.clean(string(m.input)) + "_  " + s.Muted.Render("enter search  esc cancel")
	}
	var parts []string
	if len(m.lines) > 0 {
		parts = append(parts, fmt.Sprintf("lines %d-%d of %d", m.top+1, m.shown(), len(m.lines)))
	}
	if m.follow {
		parts = append(parts, s.Badge[styles.Info].Render("[FOLLOW]"))
	}
	if m.cur >= 0 && len(m.matches) > 0 {
		parts = append(parts, fmt.Sprintf("match %d/%d for %q", m.cur+1, len(m.matches), m.clean(m.query)))
	}
	if m.msg != "" {
		parts = append(parts, m.msg)
	}
	return strings.Join(parts, "  ")
}

func dots(s *styles.Styles) string {
	if s.Ellipsis == "~" {
		return "..."
	}
	return s.Ellipsis
}
