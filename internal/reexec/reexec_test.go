package reexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// testParamEnv is a parameter of the test modes, passed as a mode passes
// its own.
const testParamEnv = "VIRTCON_REEXEC_TEST_PARAM"

func init() {
	// reports what the child sees: its parameter and the marker
	Register("test-echo", func() int {
		v, set := os.LookupEnv(Env)
		fmt.Printf("param=%s marker-set=%v\n", os.Getenv(testParamEnv), set && v != "")
		return 0
	})
	Register("test-exit-7", func() int { return 7 })
}

func TestMain(m *testing.M) {
	Init()
	os.Exit(m.Run())
}

func self(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

func TestCommandRunsTheMode(t *testing.T) {
	tests := []struct {
		name     string
		mode     string
		env      []string
		wantOut  string
		wantCode int
	}{
		{name: "mode with its parameter", mode: "test-echo", env: []string{testParamEnv + "=x"},
			wantOut: "param=x marker-set=false\n"},
		{name: "inherited marker replaced", mode: "test-echo", env: []string{Env + "=test-exit-7", testParamEnv + "=y"},
			wantOut: "param=y marker-set=false\n"},
		{name: "exit status passed on", mode: "test-exit-7", env: []string{}, wantCode: 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := Command(context.Background(), self(t), tt.mode, tt.env)
			if n := strings.Count(strings.Join(cmd.Env, "\n"), Env+"="); n != 1 {
				t.Errorf("child environment has %d markers; want 1: %q", n, cmd.Env)
			}
			if len(cmd.Args) != 1 {
				t.Errorf("child argv %q; want the program alone", cmd.Args)
			}
			var out, errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.wantCode {
				t.Errorf("exit status %d; want %d (stderr %q)", code, tt.wantCode, errOut.String())
			}
			if out.String() != tt.wantOut {
				t.Errorf("stdout %q; want %q (the tests ran instead of the mode?)", out.String(), tt.wantOut)
			}
		})
	}
}

func TestCommandInheritsTheEnvironmentWhenNil(t *testing.T) {
	t.Setenv(testParamEnv, "inherited")
	t.Setenv(Env, "test-exit-7") // as a mode's own child would have it
	cmd := Command(context.Background(), self(t), "test-echo", nil)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := "param=inherited marker-set=false\n"; string(out) != want {
		t.Errorf("stdout %q; want %q", out, want)
	}
}

func TestUnknownModeNeverRunsMain(t *testing.T) {
	cmd := exec.Command(self(t), "-test.run=^TestUnknownModeNeverRunsMain$", "-test.v")
	cmd.Env = append(os.Environ(), Env+"=no-such-mode")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("child: %v; want exit status 2", err)
	}
	if strings.Contains(out.String(), "RUN") {
		t.Errorf("the tests ran in a child of an unknown mode: %q", out.String())
	}
	for _, want := range []string{`"no-such-mode"`, "test-echo", "test-exit-7"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr %q; want it to name %s", errOut.String(), want)
		}
	}
}

func TestCommandRefusesAnUnregisteredMode(t *testing.T) {
	err := Command(context.Background(), self(t), "never-registered", nil).Start()
	if err == nil || !strings.Contains(err.Error(), `"never-registered"`) {
		t.Errorf("Start: %v; want an error naming the mode", err)
	}
}

func TestRegisterRefuses(t *testing.T) {
	tests := []struct {
		name string
		mode string
		fn   func() int
	}{
		{name: "empty name", mode: "", fn: func() int { return 0 }},
		{name: "upper case", mode: "Probe", fn: func() int { return 0 }},
		{name: "equals sign", mode: "a=b", fn: func() int { return 0 }},
		{name: "twice", mode: "test-echo", fn: func() int { return 0 }},
		{name: "nil function", mode: "test-nil", fn: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q) did not panic", tt.mode)
				}
			}()
			Register(tt.mode, tt.fn)
		})
	}
	if got, want := strings.Join(Modes(), ","), "test-echo,test-exit-7"; got != want {
		t.Errorf("Modes() = %s; want %s", got, want)
	}
}

// An empty marker is no marker: the program starts normally.
func TestEmptyMarkerIsNormalStart(t *testing.T) {
	cmd := exec.Command(self(t), "-test.run", "^TestEmptyMarkerProbe$", "-test.v")
	cmd.Env = append(os.Environ(), Env+"=", "VIRTCON_REEXEC_PROBE=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "main ran") {
		t.Errorf("with %s= the program did not run its main: %v\n%s", Env, err, out)
	}
}

func TestEmptyMarkerProbe(t *testing.T) {
	if os.Getenv("VIRTCON_REEXEC_PROBE") == "" {
		t.Skip("run by TestEmptyMarkerIsNormalStart only")
	}
	fmt.Println("main ran")
}

// A program that never called Init would run its own main (a test binary:
// its test suite) as the child: Command refuses.
func TestCommandNeedsInit(t *testing.T) {
	mu.Lock()
	inited = false
	mu.Unlock()
	t.Cleanup(func() { mu.Lock(); inited = true; mu.Unlock() })
	if cmd := Command(context.Background(), self(t), "test-echo", nil); cmd.Err == nil {
		t.Error("Command of this program's mode before Init: no error")
	}
	if cmd := Command(context.Background(), "/bin/true", "test-echo", nil); cmd.Err != nil {
		t.Errorf("Command of another program: %v; want no error (it dispatches on its own)", cmd.Err)
	}
}
