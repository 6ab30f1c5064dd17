package cli

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/vm"
)

// seamCase is one command line run against the fake VM service: the
// calls it must make, exactly, and what it must print and exit with.
type seamCase struct {
	name      string
	args      []string
	script    func(*fakeVMs) // scripted answers; nil: the fake as it is
	calls     []call
	code      int
	stdout    string         // exact, unless json is set
	json      map[string]any // stdout decoded as a JSON object
	stderr    string         // exact, unless stderrHas is set
	stderrHas []string       // words stderr must have (wording not virt's own)
	check     func(*testing.T, *fakeVMs)
}

func runSeam(t *testing.T, cases []seamCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeVMs()
			if tc.script != nil {
				tc.script(f)
			}
			out, errOut, code := runFake(t, f, tc.args...)
			line := "virt " + strings.Join(tc.args, " ")
			if !reflect.DeepEqual(f.calls, tc.calls) {
				t.Errorf("%s: calls\n  %v\nwant\n  %v", line, f.calls, tc.calls)
			}
			if code != tc.code {
				t.Errorf("%s: exit %d; want %d (stderr %q)", line, code, tc.code, errOut)
			}
			if tc.json != nil {
				var got map[string]any
				if err := json.Unmarshal([]byte(out), &got); err != nil {
					t.Errorf("%s: stdout is not a JSON object: %v\n%s", line, err, out)
				} else if !reflect.DeepEqual(got, tc.json) {
					t.Errorf("%s: stdout\n  %v\nwant\n  %v", line, got, tc.json)
				}
			} else if out != tc.stdout {
				t.Errorf("%s: stdout %q; want %q", line, out, tc.stdout)
			}
			if tc.stderrHas != nil {
				for _, w := range tc.stderrHas {
					if !strings.Contains(errOut, w) {
						t.Errorf("%s: stderr %q lacks %q", line, errOut, w)
					}
				}
			} else if errOut != tc.stderr {
				t.Errorf("%s: stderr\n  %q\nwant\n  %q", line, errOut, tc.stderr)
			}
			if tc.check != nil {
				tc.check(t, f)
			}
		})
	}
}

func fail(method string, err error) func(*fakeVMs) {
	return func(f *fakeVMs) { f.errs[method] = err }
}

const usageLine = "Run 'virt --help' for usage.\n"

// webJSON is the fake's "web" as -o json prints its entry, with changes.
func webJSON(changes map[string]any) map[string]any {
	m := map[string]any{
		"name": "web", "uid": webUID, "class": vm.ClassManaged, "phase": vm.PhaseStopped,
		"accel": nil, "pid": nil, "cpus": 1.0, "memoryMiB": 256.0,
		"generation": nil, "observedGeneration": nil, "directorGeneration": nil,
		"autostart": false, "startupOrder": 2.0, "startupDelay": "10s",
	}
	for k, v := range changes {
		m[k] = v
	}
	return m
}

func TestVMStartSeam(t *testing.T) {
	saved := &vm.SavedStateError{Name: "web", Path: "/var/lib/virtcon/vms/" + webUID + "/saved.state", Reason: vm.SavedOtherQEMU, Detail: "saved by QEMU 8.2.2, this is 9.0.0"}
	runSeam(t, []seamCase{{
		name:   "ok",
		args:   []string{"vm", "start", "web"},
		calls:  []call{{"StartWith", []any{"web", vm.StartOptions{}}}, {"Peek", []any{"web"}}},
		stdout: "web: Running (pid 4242, accel tcg)\n",
	}, {
		name:   "--discard-saved",
		args:   []string{"vm", "start", "web", "--discard-saved"},
		calls:  []call{{"StartWith", []any{"web", vm.StartOptions{DiscardSaved: true}}}, {"Peek", []any{"web"}}},
		stdout: "web: Running (pid 4242, accel tcg)\n",
	}, {
		name:  "-o json",
		args:  []string{"vm", "start", "web", "-o", "json"},
		calls: []call{{"StartWith", []any{"web", vm.StartOptions{}}}, {"Peek", []any{"web"}}},
		json:  webJSON(map[string]any{"phase": vm.PhaseRunning, "pid": 4242.0, "accel": "tcg"}),
	}, {
		name:   "saved state refused: the --discard-saved hint",
		args:   []string{"vm", "start", "web"},
		script: fail("StartWith", saved),
		calls:  []call{{"StartWith", []any{"web", vm.StartOptions{}}}},
		code:   ExitError,
		stderr: "virt: " + saved.Error() + "; nothing was started: virt vm start --discard-saved web boots it fresh, losing what it had in RAM\n",
	}, {
		name:   "not found",
		args:   []string{"vm", "start", "nope"},
		calls:  []call{{"StartWith", []any{"nope", vm.StartOptions{}}}},
		code:   ExitError,
		stderr: "virt: vm \"nope\": not found\n",
	}, {
		name:   "ambiguous reference",
		args:   []string{"vm", "start", "web"},
		script: fail("StartWith", errAmbiguous("web")),
		calls:  []call{{"StartWith", []any{"web", vm.StartOptions{}}}},
		code:   ExitError,
		stderr: "virt: " + errAmbiguous("web").Error() + "\n",
	}, {
		name:   "unreadable spec: not permitted",
		args:   []string{"vm", "start", "web"},
		script: fail("StartWith", errUnreadableSpec(webUID)),
		calls:  []call{{"StartWith", []any{"web", vm.StartOptions{}}}},
		code:   ExitNotPermitted,
		stderr: "virt: " + errUnreadableSpec(webUID).Error() + " (needs root: run it with sudo)\n",
	}, {
		name:   "empty reference: bad input",
		args:   []string{"vm", "start", ""},
		script: fail("StartWith", errField("name", "", "a VM name or UID is required")),
		calls:  []call{{"StartWith", []any{"", vm.StartOptions{}}}},
		code:   ExitUsage,
		stderr: "virt: " + errField("name", "", "a VM name or UID is required").Error() + "\n",
	}, {
		name:   "no name: usage",
		args:   []string{"vm", "start"},
		code:   ExitUsage,
		stderr: "virt: accepts 1 arg(s), received 0\n" + usageLine,
	}})
}

func TestVMStopSeam(t *testing.T) {
	gentle := vm.StopOptions{Timeout: vm.DefaultStopTimeout}
	forced := vm.StopOptions{Timeout: vm.DefaultStopTimeout, Force: true}
	const acpi = "web stopped: powered off by ACPI in 1.2s\n"
	how := func(r vm.StopResult) func(*fakeVMs) { return func(f *fakeVMs) { f.stop = r } }
	runSeam(t, []seamCase{{
		name:   "forced, the guest did not power off in time: quit",
		args:   []string{"vm", "stop", "web", "--timeout", "5s", "--force"},
		script: how(vm.StopResult{How: vm.StoppedQuit, Took: 5100 * time.Millisecond}),
		calls:  []call{{"PowerOff", []any{"web", vm.StopOptions{Timeout: 5 * time.Second, Force: true}}}},
		stderr: "web stopped: the guest did not power off in 5s, so QEMU was told to quit\n",
	}, {
		name:   "not forced, the guest did not power off in time: left running, exit 1, the way on said",
		args:   []string{"vm", "stop", "web", "--timeout", "5s"},
		script: fail("PowerOff", &vm.StopTimeoutError{Name: "web", Timeout: 5 * time.Second}),
		calls:  []call{{"PowerOff", []any{"web", vm.StopOptions{Timeout: 5 * time.Second}}}},
		code:   ExitError,
		stderr: "virt: " + (&vm.StopTimeoutError{Name: "web", Timeout: 5 * time.Second}).Error() + "; --force ends QEMU once --timeout has run out, virt vm kill at once\n",
	}, {
		name:   "forced: quit",
		args:   []string{"vm", "stop", "web", "--force"},
		script: how(vm.StopResult{How: vm.StoppedQuit, Took: 80 * time.Millisecond}),
		calls:  []call{{"PowerOff", []any{"web", forced}}},
		stderr: "web stopped: QEMU quit in 80ms\n",
	}, {
		name:   "the guest never started: quit at once, not blamed on the timeout",
		args:   []string{"vm", "stop", "web"},
		script: how(vm.StopResult{How: vm.StoppedQuit, Took: 40 * time.Millisecond}),
		calls:  []call{{"PowerOff", []any{"web", gentle}}},
		stderr: "web stopped: QEMU quit in 40ms\n",
	}, {
		name:   "killed",
		args:   []string{"vm", "stop", "web", "--force"},
		script: how(vm.StopResult{How: vm.StoppedKilled, Took: 3 * time.Second}),
		calls:  []call{{"PowerOff", []any{"web", forced}}},
		stderr: "web stopped: QEMU killed in 3s (it answered neither the power button nor quit)\n",
	}, {
		name:   "not running",
		args:   []string{"vm", "stop", "web"},
		script: how(vm.StopResult{How: vm.StoppedNotRunning}),
		calls:  []call{{"PowerOff", []any{"web", gentle}}},
		stderr: "web was not running\n",
	}, {
		name:   "gentle",
		args:   []string{"vm", "stop", "web"},
		calls:  []call{{"PowerOff", []any{"web", gentle}}},
		stderr: acpi,
	}, {
		name:   "--timeout",
		args:   []string{"vm", "stop", "web", "--timeout", "5s"},
		calls:  []call{{"PowerOff", []any{"web", vm.StopOptions{Timeout: 5 * time.Second}}}},
		stderr: acpi,
	}, {
		name:   "--timeout in bare seconds",
		args:   []string{"vm", "stop", "web", "--timeout", "90"},
		calls:  []call{{"PowerOff", []any{"web", vm.StopOptions{Timeout: 90 * time.Second}}}},
		stderr: acpi,
	}, {
		name:   "--force",
		args:   []string{"vm", "stop", "web", "--force"},
		calls:  []call{{"PowerOff", []any{"web", vm.StopOptions{Timeout: vm.DefaultStopTimeout, Force: true}}}},
		stderr: acpi,
	}, {
		name:   "--timeout 0: now, no button",
		args:   []string{"vm", "stop", "web", "--timeout", "0"},
		script: how(vm.StopResult{How: vm.StoppedQuit, Took: 80 * time.Millisecond}),
		calls:  []call{{"PowerOff", []any{"web", vm.StopOptions{Now: true}}}},
		stderr: "web stopped: QEMU quit in 80ms\n",
	}, {
		name:   "--timeout 0 --force: now too",
		args:   []string{"vm", "stop", "web", "--timeout", "0", "--force"},
		script: how(vm.StopResult{How: vm.StoppedQuit, Took: 80 * time.Millisecond}),
		calls:  []call{{"PowerOff", []any{"web", vm.StopOptions{Now: true, Force: true}}}},
		stderr: "web stopped: QEMU quit in 80ms\n",
	}, {
		name:      "negative --timeout: usage, nothing stopped",
		args:      []string{"vm", "stop", "web", "--timeout", "-5s"},
		code:      ExitUsage,
		stderrHas: []string{"--timeout", `"-5s"`, usageLine},
	}, {
		name:   "not found",
		args:   []string{"vm", "stop", "nope", "--force"},
		calls:  []call{{"PowerOff", []any{"nope", vm.StopOptions{Timeout: vm.DefaultStopTimeout, Force: true}}}},
		code:   ExitError,
		stderr: "virt: vm \"nope\": not found\n",
	}, {
		name:   "unreadable spec: not permitted",
		args:   []string{"vm", "stop", "web"},
		script: fail("PowerOff", errUnreadableSpec(webUID)),
		calls:  []call{{"PowerOff", []any{"web", gentle}}},
		code:   ExitNotPermitted,
		stderr: "virt: " + errUnreadableSpec(webUID).Error() + " (needs root: run it with sudo)\n",
	}})
}

func TestVMKillPauseResumeRebootSeam(t *testing.T) {
	var cases []seamCase
	for _, c := range []struct{ cmd, method string }{
		{"kill", "Kill"}, {"pause", "Pause"}, {"resume", "Resume"}, {"reboot", "Reboot"},
	} {
		cases = append(cases, seamCase{
			name:   c.cmd,
			args:   []string{"vm", c.cmd, "web"},
			calls:  []call{{c.method, []any{"web"}}},
			stderr: "web: " + c.cmd + " done\n",
		}, seamCase{
			name:   c.cmd + " not running",
			args:   []string{"vm", c.cmd, "web"},
			script: fail(c.method, errNotRunning("web", c.cmd)),
			calls:  []call{{c.method, []any{"web"}}},
			code:   ExitError,
			stderr: "virt: vm \"web\": " + c.cmd + ": not running\n",
		}, seamCase{
			name:   c.cmd + " not found",
			args:   []string{"vm", c.cmd, "nope"},
			calls:  []call{{c.method, []any{"nope"}}},
			code:   ExitError,
			stderr: "virt: vm \"nope\": not found\n",
		}, seamCase{
			name:   c.cmd + " unreadable spec: not permitted",
			args:   []string{"vm", c.cmd, "web"},
			script: fail(c.method, errUnreadableSpec(webUID)),
			calls:  []call{{c.method, []any{"web"}}},
			code:   ExitNotPermitted,
			stderr: "virt: " + errUnreadableSpec(webUID).Error() + " (needs root: run it with sudo)\n",
		})
	}
	runSeam(t, cases)
}

func TestVMDeleteSeam(t *testing.T) {
	runErr := &vm.RunningError{Name: "web", Op: "delete", PID: 4242}
	runSeam(t, []seamCase{{
		name:   "stopped",
		args:   []string{"vm", "delete", "web"},
		calls:  []call{{"Delete", []any{"web", false}}},
		stderr: "web deleted\n",
	}, {
		name:   "rm",
		args:   []string{"vm", "rm", "web"},
		calls:  []call{{"Delete", []any{"web", false}}},
		stderr: "web deleted\n",
	}, {
		name:   "running without --force: refused, with what to do",
		args:   []string{"vm", "delete", "web"},
		script: fail("Delete", runErr),
		calls:  []call{{"Delete", []any{"web", false}}},
		code:   ExitError,
		stderr: "virt: vm \"web\": delete: is running (pid 4242); stop it first or use --force\n",
	}, {
		name:   "--force",
		args:   []string{"vm", "delete", "web", "--force"},
		calls:  []call{{"Delete", []any{"web", true}}},
		stderr: "web deleted\n",
	}, {
		name:   "not found",
		args:   []string{"vm", "delete", "nope", "--force"},
		calls:  []call{{"Delete", []any{"nope", true}}},
		code:   ExitError,
		stderr: "virt: vm \"nope\": not found\n",
	}, {
		name:   "ambiguous reference",
		args:   []string{"vm", "delete", "web"},
		script: fail("Delete", errAmbiguous("web")),
		calls:  []call{{"Delete", []any{"web", false}}},
		code:   ExitError,
		stderr: "virt: " + errAmbiguous("web").Error() + "\n",
	}})
}

func TestVMSaveSeam(t *testing.T) {
	res := &vm.SaveResult{Path: "/var/lib/virtcon/vms/" + webUID + "/saved.state", Bytes: 1500000, Took: 1500 * time.Millisecond}
	saves := func(f *fakeVMs) { f.save = res }
	left := func(max time.Duration) func(*testing.T, *fakeVMs) {
		return func(t *testing.T, f *fakeVMs) {
			if f.saveLeft <= max-time.Minute || f.saveLeft > max {
				t.Errorf("Save's context had %v left; want the --timeout, %v", f.saveLeft, max)
			}
		}
	}
	runSeam(t, []seamCase{{
		name:   "table",
		args:   []string{"vm", "save", "web"},
		script: saves,
		calls:  []call{{"Save", []any{"web"}}},
		stdout: "web: Saved (1.4 MiB in 1.5s); virt vm start web resumes it\n",
		stderr: "saving web…\n",
		check:  left(vm.DefaultSaveTimeout),
	}, {
		name:   "-o json",
		args:   []string{"vm", "save", "web", "-o", "json"},
		script: saves,
		calls:  []call{{"Save", []any{"web"}}},
		json:   map[string]any{"name": "web", "path": res.Path, "bytes": 1500000.0, "took": "1.5s"},
		stderr: "saving web…\n",
	}, {
		name:   "--timeout bounds the save",
		args:   []string{"vm", "save", "web", "--timeout", "2m"},
		script: saves,
		calls:  []call{{"Save", []any{"web"}}},
		stdout: "web: Saved (1.4 MiB in 1.5s); virt vm start web resumes it\n",
		stderr: "saving web…\n",
		check:  left(2 * time.Minute),
	}, {
		name:   "--timeout 0: usage, nothing saved",
		args:   []string{"vm", "save", "web", "--timeout", "0"},
		code:   ExitUsage,
		stderr: "virt: --timeout 0s: must be more than 0\n" + usageLine,
	}, {
		name:   "not running",
		args:   []string{"vm", "save", "web"},
		script: fail("Save", errNotRunning("web", "save")),
		calls:  []call{{"Save", []any{"web"}}},
		code:   ExitError,
		stderr: "saving web…\nvirt: vm \"web\": save: not running\n",
	}, {
		name:   "not found",
		args:   []string{"vm", "save", "nope"},
		calls:  []call{{"Save", []any{"nope"}}},
		code:   ExitError,
		stderr: "saving nope…\nvirt: vm \"nope\": not found\n",
	}})
}

func TestVMAutostartSeam(t *testing.T) {
	orderErr := errField("spec.startup.order", 2000, "must be 0 to 1000")
	runSeam(t, []seamCase{{
		name: "on keeps the order and delay",
		args: []string{"vm", "autostart", "web", "on"},
		calls: []call{
			{"Peek", []any{"web"}},
			{"SetAutostart", []any{webUID, true, 2, 10 * time.Second}},
			{"Peek", []any{webUID}},
		},
		stdout: "web: autostart on, startup order 2, delay 10s\n",
	}, {
		name: "off with --startup-order and --startup-delay",
		args: []string{"vm", "autostart", "web", "off", "--startup-order", "3", "--startup-delay", "30"},
		calls: []call{
			{"Peek", []any{"web"}},
			{"SetAutostart", []any{webUID, false, 3, 30 * time.Second}},
			{"Peek", []any{webUID}},
		},
		stdout: "web: autostart off, startup order 3, delay 30s\n",
	}, {
		name: "-o json",
		args: []string{"vm", "autostart", "web", "on", "--startup-order", "0", "-o", "json"},
		calls: []call{
			{"Peek", []any{"web"}},
			{"SetAutostart", []any{webUID, true, 0, 10 * time.Second}},
			{"Peek", []any{webUID}},
		},
		json: webJSON(map[string]any{"autostart": true, "startupOrder": 0.0}),
	}, {
		name:   "neither on nor off: usage, nothing changed",
		args:   []string{"vm", "autostart", "web", "maybe"},
		code:   ExitUsage,
		stderr: "virt: autostart \"maybe\": want on or off\n" + usageLine,
	}, {
		name:   "an external guest: usage, nothing changed",
		args:   []string{"vm", "autostart", "ext", "on"},
		calls:  []call{{"Peek", []any{"ext"}}},
		code:   ExitUsage,
		stderr: "virt: ext is EXTERNAL: nothing acts on it\n" + usageLine,
	}, {
		name:   "not found",
		args:   []string{"vm", "autostart", "nope", "on"},
		calls:  []call{{"Peek", []any{"nope"}}},
		code:   ExitError,
		stderr: "virt: vm \"nope\": not found\n",
	}, {
		name:   "a field the core refuses: bad input",
		args:   []string{"vm", "autostart", "web", "on", "--startup-order", "2000"},
		script: fail("SetAutostart", orderErr),
		calls: []call{
			{"Peek", []any{"web"}},
			{"SetAutostart", []any{webUID, true, 2000, 10 * time.Second}},
		},
		code:   ExitUsage,
		stderr: "virt: " + orderErr.Error() + "\n",
	}, {
		name:   "unreadable spec: not permitted",
		args:   []string{"vm", "autostart", "web", "on"},
		script: fail("SetAutostart", errUnreadableSpec(webUID)),
		calls: []call{
			{"Peek", []any{"web"}},
			{"SetAutostart", []any{webUID, true, 2, 10 * time.Second}},
		},
		code:   ExitNotPermitted,
		stderr: "virt: " + errUnreadableSpec(webUID).Error() + " (needs root: run it with sudo)\n",
	}})
}
