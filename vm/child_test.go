package vm

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// childPIDFileEnv makes TestRunChildHelperProcess the parent that a test
// kills: it runs a child through runTool, which writes its PID to the file
// named, and waits.
const childPIDFileEnv = "VIRTCON_TEST_RUNCHILD_PIDFILE"

func TestRunChildHelperProcess(t *testing.T) {
	pidFile := os.Getenv(childPIDFileEnv)
	if pidFile == "" {
		t.Skip("the parent process of TestRunToolChildDiesWithVirt (runs only when that test starts it)")
	}
	// what a qemu-img convert would be: a long child of an operation
	err := runTool(context.Background(), "/bin/sh", "-c", `echo $$ > "$0.tmp" && mv "$0.tmp" "$0" && exec sleep 600`, pidFile)
	t.Fatalf("runTool returned (%v); it should have been killed with its parent", err)
}

// TestRunToolChildDiesWithVirt kills -9 a process that waits in runTool
// for a child and checks that the child ends too: a qemu-img that went
// on after virt was killed would write a VM's files with its lock gone.
func TestRunToolChildDiesWithVirt(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	parent := exec.Command(os.Args[0], "-test.run=^TestRunChildHelperProcess$", "-test.count=1")
	parent.Env = append(os.Environ(), childPIDFileEnv+"="+pidFile)
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- parent.Wait() }()
	defer parent.Process.Kill()

	var child int
	deadline := time.Now().Add(30 * time.Second)
	for child == 0 {
		if b, err := os.ReadFile(pidFile); err == nil {
			child, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		if child == 0 {
			select {
			case err := <-waited:
				t.Fatalf("the parent ended before its child started: %v", err)
			case <-time.After(10 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatal("the child never wrote its PID")
			}
		}
	}
	defer syscall.Kill(child, syscall.SIGKILL)
	if err := parent.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-waited
	deadline = time.Now().Add(10 * time.Second)
	for {
		st, _, err := procFS{root: "/proc"}.stat(child)
		if err != nil || st == "Z" || st == "X" {
			return // gone, or dead and not yet reaped by its new parent
		}
		if time.Now().After(deadline) {
			t.Fatalf("child %d still runs (state %s) 10 s after its parent was killed -9", child, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
