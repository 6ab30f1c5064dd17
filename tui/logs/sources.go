package logs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/vm"
)

// LogFile is one log the screen can show.
type LogFile struct {
	// Name is the label in the picker: the file name of one of virtcon's
	// logs, the VM's name (else its UID) for a serial log.
	Name string
	Path string
	// VM is the name (else the UID) of the VM whose serial log this is;
	// "" for virtcon's own logs.
	VM   string
	Size int64
}

// Sources are how the screen finds and reads logs; each is called from a
// tea.Cmd, never from Update.
type Sources struct {
	// List returns virtcon's own logs first, then the VM serial logs.
	List func(ctx context.Context) ([]LogFile, error)
	// Read returns at most the last maxBytes of a file.
	Read func(ctx context.Context, path string, maxBytes int64) ([]byte, error)
}

// MaxRead is how much of a log's end the screen reads.
const MaxRead = 1 << 20

// VMs is what the screen asks of the VM manager (vm.Manager): the names of
// the VMs, and where each one's serial log is.
type VMs interface {
	List(ctx context.Context) ([]vm.Entry, error)
	SerialLogDir() string
	SerialLogPath(uid string) string
}

var _ VMs = (*vm.Manager)(nil)

// LiveSources lists the logs under layout's log directory and, through
// vms (nil: none), the VM serial logs, each named by its VM.
func LiveSources(layout paths.Layout, vms VMs) Sources {
	return Sources{
		List: func(ctx context.Context) ([]LogFile, error) { return listLogs(ctx, layout.LogDir(), vms) },
		Read: ReadTail,
	}
}

func listLogs(ctx context.Context, dir string, vms VMs) ([]LogFile, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list logs: %w", err)
	}
	var own []LogFile
	for _, e := range ents {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".log") {
			continue
		}
		f := LogFile{Name: e.Name(), Path: filepath.Join(dir, e.Name())}
		if info, err := e.Info(); err == nil {
			f.Size = info.Size()
		}
		own = append(own, f)
	}
	if vms == nil {
		return own, nil
	}
	serialDir := vms.SerialLogDir()
	vmDirs, err := os.ReadDir(serialDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return own, fmt.Errorf("list VM serial logs: %w", err)
	}
	names := map[string]string{}
	if len(vmDirs) > 0 {
		// a failing list still names what it could; the UID stands in for the rest
		entries, _ := vms.List(ctx)
		for _, e := range entries {
			if e.UID != "" && e.Name != "" && e.Name != "-" {
				names[strings.ToLower(e.UID)] = e.Name
			}
		}
	}
	var serial []LogFile
	for _, d := range vmDirs {
		if !d.IsDir() {
			continue
		}
		uid := d.Name()
		p := vms.SerialLogPath(uid)
		info, err := os.Stat(p)
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		name := names[strings.ToLower(uid)]
		if name == "" {
			name = uid
		}
		serial = append(serial, LogFile{Name: name, Path: p, VM: name, Size: info.Size()})
	}
	sort.Slice(serial, func(i, j int) bool { return serial[i].Name < serial[j].Name })
	return append(own, serial...), nil
}

// ReadTail returns the last maxBytes of the regular file at path, from the
// start of its first whole line. It opens without blocking, so a FIFO
// planted among the logs cannot hang the console.
func ReadTail(ctx context.Context, path string, maxBytes int64) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("read log: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read log: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("read log %s: not a regular file", path)
	}
	var off int64
	if st.Size() > maxBytes {
		off = st.Size() - maxBytes
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return nil, fmt.Errorf("read log %s: %w", path, err)
		}
	}
	data, err := io.ReadAll(io.LimitReader(f, maxBytes))
	if err != nil {
		return nil, fmt.Errorf("read log %s: %w", path, err)
	}
	if off > 0 {
		// the first line is cut: start at the next whole one
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			data = data[i+1:]
		}
	}
	return data, nil
}

// Clean splits log text into lines fit for the terminal: each line is
// cleaned by common.Clean (escape sequences, control characters and
// invalid UTF-8 removed; with ascii, every character beyond 0x7E becomes
// '?'), with its tabs expanded to stops of 8. An unterminated escape
// sequence only eats its own line.
func Clean(b []byte, ascii bool) []string {
	lines, _ := cleanLog(b, ascii, false)
	return lines
}

// cleanLog is Clean; with structured (virtcon's own logs), JSON lines are
// shown as Readable renders them, and raw holds the cleaned line as
// written for each line it changed ("" for the others), so a search
// matches what is shown and what is in the file. raw is nil when no line
// changed.
func cleanLog(b []byte, ascii, structured bool) (lines, raw []string) {
	if len(b) == 0 {
		return nil, nil
	}
	in := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	lines = make([]string, len(in))
	for i, l := range in {
		if structured {
			if r, ok := Readable(string(l)); ok {
				// decoded strings may hold escapes (\u001b): clean after
				if raw == nil {
					raw = make([]string, len(in))
				}
				raw[i] = cleanLine(ansi.Strip(string(l)), ascii)
				lines[i] = cleanLine(ansi.Strip(r), ascii)
				continue
			}
		}
		lines[i] = cleanLine(ansi.Strip(string(l)), ascii)
	}
	return lines, raw
}

// cleanLine cleans the pieces between tabs and pads each tab to the next
// stop, counting the runes drawn (close enough for logs).
func cleanLine(l string, ascii bool) string {
	if !strings.Contains(l, "\t") {
		return common.Clean(l, ascii)
	}
	var sb strings.Builder
	col := 0
	for i, seg := range strings.Split(l, "\t") {
		if i > 0 {
			n := 8 - col%8
			sb.WriteString(strings.Repeat(" ", n))
			col += n
		}
		c := common.Clean(seg, ascii)
		sb.WriteString(c)
		col += utf8.RuneCountInString(c)
	}
	return sb.String()
}
