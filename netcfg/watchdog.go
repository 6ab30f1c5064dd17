package netcfg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/virtcon/virtcon/internal/proc"
	"github.com/virtcon/virtcon/internal/reexec"
	"github.com/virtcon/virtcon/paths"
)

// WatchdogEnv tells the watchdog process the path of the pending try
// record (and marks it, for whoever looks in /proc).
const WatchdogEnv = "VIRTCON_NET_WATCHDOG"

const (
	// wdIDEnv carries the try's ID: a record with another ID is a later try.
	wdIDEnv = "VIRTCON_NET_WATCHDOG_ID"
	// wdReadyEnv names the descriptor on which the watchdog says it is
	// watching; Try applies nothing before.
	wdReadyEnv = "VIRTCON_NET_WATCHDOG_READY_FD"
	wdReady    = "ready\n"
	// wdLogName is the watchdog's log under the log directory.
	wdLogName = "network-watchdog.log"
	// wdPoll is how often the watchdog reads the record again; Confirm,
	// Rollback and a failed Try wake it at once with SIGUSR1.
	wdPoll = 500 * time.Millisecond
	// wdStartTimeout bounds the wait for the watchdog to be ready.
	wdStartTimeout = 10 * time.Second
	// wdAttempts and wdRetryDelay: a failed rollback is retried.
	wdAttempts   = 3
	wdRetryDelay = time.Second
)

// wdExecutable is the program the watchdog runs: this one. Tests may
// replace it before any test runs in parallel.
var wdExecutable = os.Executable

// wdMode is the watchdog's child mode (see internal/reexec).
const wdMode = "net-watchdog"

func init() { reexec.Register(wdMode, wdMain) }

// wdMain is a try's watchdog (the program's main calls reexec.Init first
// thing), started by Try for the record that VIRTCON_NET_WATCHDOG names.
// It waits for the deadline, standing down as soon as the record is
// removed (confirmed, rolled back) or holds another try, and otherwise
// restores the snapshot, removes the record and exits. It works in the
// network namespace it was started in and ignores SIGHUP and SIGINT;
// SIGTERM makes it roll back at once.
func wdMain() int {
	return wdRun(os.Getenv(WatchdogEnv), os.Getenv(wdIDEnv))
}

func wdRun(path, id string) int {
	signal.Ignore(syscall.SIGHUP, syscall.SIGINT, syscall.SIGPIPE)
	wake := make(chan os.Signal, 1)
	signal.Notify(wake, syscall.SIGUSR1)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("watchdog", os.Getpid(), "record", path)

	var ready *os.File
	if fd, err := strconv.Atoi(os.Getenv(wdReadyEnv)); err == nil && fd > 2 {
		ready = os.NewFile(uintptr(fd), "watchdog-ready")
	}
	p, err := tryRead(path)
	if err != nil {
		log.Error("network try watchdog: cannot read the record; not watching", "err", err)
		return 1 // ready closes unwritten: Try fails before applying
	}
	if id == "" {
		id = p.ID
	}
	log = log.With("id", id)
	if p.ID != id {
		log.Info("network try watchdog: record holds another try; standing down")
		return 0
	}
	if ready != nil {
		_, _ = io.WriteString(ready, wdReady)
		_ = ready.Close()
	}
	log.Info("network try watchdog: watching", "deadline", p.Deadline.Format(time.RFC3339), "links", p.Snapshot.linkNames())

	reason := "deadline reached"
wait:
	for {
		left := time.Until(p.Deadline)
		if left <= 0 {
			break
		}
		t := time.NewTimer(min(left, wdPoll))
		select {
		case <-t.C:
		case <-wake:
		case s := <-term:
			t.Stop()
			reason = "got " + s.String()
			break wait
		}
		t.Stop()
		cur, err := tryRead(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			log.Info("network try watchdog: try confirmed or rolled back; standing down")
			return 0
		case err != nil:
			log.Warn("network try watchdog: cannot read the record; keeping the last deadline", "err", err)
		case cur.ID != id:
			log.Info("network try watchdog: record holds another try; standing down", "other", cur.ID)
			return 0
		default:
			p = cur
		}
	}
	return wdRollback(log, path, id, p, reason)
}

// wdRollback restores the snapshot under the lock, unless the try was
// confirmed or rolled back meanwhile.
func wdRollback(log *slog.Logger, path, id string, last *Pending, reason string) int {
	unlock, err := tryLock(path)
	if err != nil {
		log.Warn("network try watchdog: rolling back without the lock", "err", err)
		unlock = func() {}
	}
	defer unlock()
	p, err := tryRead(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		log.Info("network try watchdog: try confirmed or rolled back; standing down")
		return 0
	case err != nil:
		log.Warn("network try watchdog: cannot read the record; using the last one read", "err", err)
		p = last
	case p.ID != id:
		log.Info("network try watchdog: record holds another try; standing down", "other", p.ID)
		return 0
	}
	log.Warn("network try not confirmed: rolling back", "reason", reason, "links", p.Snapshot.linkNames())
	start := time.Now()
	for attempt := 1; ; attempt++ {
		err = p.restore(context.Background(), log, path)
		if err == nil {
			break
		}
		log.Error("network try watchdog: rollback incomplete", "attempt", attempt, "err", err)
		if attempt == wdAttempts {
			p.RollbackError = err.Error()
			if werr := tryWrite(path, p); werr != nil {
				log.Error("network try watchdog: cannot record the failure", "err", werr)
			}
			log.Error("network try watchdog: giving up; the record stays for `virt net rollback`")
			return 1
		}
		time.Sleep(wdRetryDelay)
	}
	if err := tryRemove(path); err != nil {
		log.Error("network try watchdog: rolled back, but the record stays", "err", err)
		return 1
	}
	log.Info("network try rolled back", "links", p.Snapshot.linkNames(), "routes", len(p.Snapshot.Routes),
		"took", time.Since(start).Round(time.Millisecond))
	return 0
}

func (s *Snapshot) linkNames() string {
	names := make([]string, len(s.Links))
	for i, l := range s.Links {
		names[i] = l.Name
	}
	return strings.Join(names, ",")
}

// wdStart starts the watchdog for the record at path: this program again,
// in a session of its own (no controlling terminal: a dropped SSH session
// does not reach it), stdin on /dev/null, output appended to the log file,
// never waited for by the caller (a goroutine only reaps it). It returns
// once the watchdog says it is watching, or fails, with the watchdog's PID
// and start time (0 when /proc does not tell).
func wdStart(log *slog.Logger, layout paths.Layout, path, id string) (int, uint64, error) {
	exe, err := wdExecutable()
	if err != nil {
		return 0, 0, fmt.Errorf("find own executable: %w", err)
	}
	logPath := filepath.Join(layout.LogDir(), wdLogName)
	var out *os.File
	if err := os.MkdirAll(layout.LogDir(), 0o755); err == nil {
		out, err = os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			log.Warn("network try watchdog: no log file", "path", logPath, "err", err)
		}
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return 0, 0, err
	}
	defer null.Close()
	if out == nil {
		out, logPath = null, os.DevNull
	} else {
		defer out.Close()
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return 0, 0, err
	}
	defer readyR.Close()

	// it outlives this process: no ctx kills it
	cmd := reexec.Command(context.Background(), exe, wdMode, wdEnviron(path, id))
	cmd.Dir = "/"
	cmd.Stdin, cmd.Stdout, cmd.Stderr = null, out, out
	cmd.ExtraFiles = []*os.File{readyW} // fd 3
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	readyW.Close()
	if err != nil {
		return 0, 0, fmt.Errorf("run %s: %w", exe, err)
	}
	pid := cmd.Process.Pid
	// Read before the reaper can run: the PID is ours until it is reaped.
	var started uint64
	if st, err := proc.ReadStat(pid); err == nil {
		started = st.Start
	}
	go func() { _ = cmd.Wait() }() // reap it if it ends while we live

	_ = readyR.SetReadDeadline(time.Now().Add(wdStartTimeout))
	buf := make([]byte, len(wdReady))
	n, _ := io.ReadFull(readyR, buf)
	if string(buf[:n]) != wdReady {
		_ = cmd.Process.Kill()
		return 0, 0, fmt.Errorf("watchdog %s (pid %d) did not start watching (does main call reexec.Init first?); see %s", exe, pid, logPath)
	}
	log.Debug("network try watchdog started", "pid", pid, "exe", exe, "log", logPath)
	return pid, started, nil
}

func wdEnviron(path, id string) []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, WatchdogEnv+"=") || strings.HasPrefix(kv, wdIDEnv+"=") || strings.HasPrefix(kv, wdReadyEnv+"=")
	})
	return append(env, WatchdogEnv+"="+path, wdIDEnv+"="+id, wdReadyEnv+"=3")
}

// wdWake makes the record's watchdog read it again now, if it is alive.
func wdWake(p *Pending) {
	if p.WatchdogRunning() {
		_ = syscall.Kill(p.WatchdogPID, syscall.SIGUSR1)
	}
}
