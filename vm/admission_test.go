package vm

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

const validYAML = `apiVersion: virtcon/v1
kind: VirtualMachine
metadata:
  name: web-01
  labels:
    app: web
    example.com/tier: front_end.v1
spec:
  cpus: 2
  memoryMiB: 1024
  disks:
    - image: debian-12
      size: 10G
    - name: data
      size: 1G
  cloudInit:
    userData: |
      #cloud-config
      users: []
`

const validJSON = "{\n\t\"apiVersion\": \"virtcon/v1\",\n\t\"kind\": \"VirtualMachine\",\n" +
	"\t\"metadata\": {\"name\": \"k1\"},\n" +
	"\t\"spec\": {\"running\": true, \"boot\": {\"kernel\": \"/boot/vmlinuz\", \"cmdline\": \"console=ttyS0\"}}\n}\n"

func TestDecodeValid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, wantName string
		wantCPUs           int
		wantDisks          int
		wantRunning        bool
	}{
		{"yaml", validYAML, "web-01", 2, 2, false},
		{"json", validJSON, "k1", 0, 0, true},
		{"leading document marker", "---\n" + validYAML, "web-01", 2, 2, false},
		{"trailing document marker", validYAML + "---\n", "web-01", 2, 2, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			vm, err := Decode([]byte(tt.in))
			if err != nil {
				t.Fatalf("Decode: got %v; want nil", err)
			}
			if vm.Metadata.Name != tt.wantName || vm.Spec.CPUs != tt.wantCPUs || len(vm.Spec.Disks) != tt.wantDisks || vm.Spec.Running != tt.wantRunning {
				t.Errorf("got name %q cpus %d disks %d running %v; want %q %d %d %v",
					vm.Metadata.Name, vm.Spec.CPUs, len(vm.Spec.Disks), vm.Spec.Running, tt.wantName, tt.wantCPUs, tt.wantDisks, tt.wantRunning)
			}
			Defaults(vm)
			if err := Validate(vm, Limits{}); err != nil {
				t.Errorf("Validate: got %v; want nil", err)
			}
		})
	}
}

func TestDecodeInvalid(t *testing.T) {
	t.Parallel()
	head := "apiVersion: virtcon/v1\nkind: VirtualMachine\n"
	tests := []struct {
		name, in string
		want     []string // substrings of the error
	}{
		{"empty", "", []string{"empty manifest"}},
		{"blank", " \n\t\n", []string{"empty manifest"}},
		{"only a comment", "# nothing here\n", []string{"empty manifest"}},
		{"malformed", head + "metadata: [name: x\n", []string{"line"}},
		{"bad indentation", head + "metadata:\n  name: a\n bad: b\n", []string{"line"}},
		{"not a mapping", "- a\n- b\n", []string{"(document): must be a mapping"}},
		{"unknown top-level field", head + "metadata: {name: a}\nspecs: {}\n", []string{"specs: unknown field"}},
		{"unknown metadata field", head + "metadata: {name: a, namespace: b}\n", []string{"metadata.namespace: unknown field"}},
		{"unknown spec field", head + "metadata: {name: a}\nspec: {cpu: 2}\n", []string{"spec.cpu: unknown field"}},
		{"unknown disk field", head + "metadata: {name: a}\nspec: {disks: [{name: a, bus: sata}]}\n", []string{"spec.disks[0].bus: unknown field"}},
		{"unknown boot field", head + "metadata: {name: a}\nspec: {boot: {kernel: /k, dtb: /d}}\n", []string{"spec.boot.dtb: unknown field"}},
		{"unknown cloudInit field", head + "metadata: {name: a}\nspec: {cloudInit: {vendorData: x}}\n", []string{"spec.cloudInit.vendorData: unknown field"}},
		{"unknown status field", head + "metadata: {name: a}\nstatus: {ip: x}\n", []string{"status.ip: unknown field"}},
		{"duplicate key", head + "metadata: {name: a}\nkind: VirtualMachine\n", []string{`"kind" already defined`}},
		{"wrong type", head + "metadata: {name: a}\nspec: {cpus: many}\n", []string{"spec.cpus: must be an integer", "many"}},
		{"case typo", head + "metadata: {name: a}\nspec: {memorymib: 512}\n", []string{"spec.memorymib: unknown field", `did you mean "memoryMiB"`}},
		{"wrong type in a list", head + "metadata: {name: a}\nspec: {disks: [{name: a, size: [1]}]}\n", []string{"spec.disks[0].size: must be a string"}},
		{"label of the wrong type", head + "metadata: {name: a, labels: {a: [1]}}\n", []string{"metadata.labels[a]: must be a string"}},
		{"two documents", head + "metadata: {name: a}\n---\n" + head + "metadata: {name: b}\n", []string{"more than one document"}},
		{"second document scalar", head + "metadata: {name: a}\n---\nhello\n", []string{"more than one document"}},
		{"second document malformed", head + "metadata: {name: a}\n---\n[\n", []string{"more than one document"}},
		{"missing apiVersion", "kind: VirtualMachine\nmetadata: {name: a}\n", []string{"apiVersion", `(got "")`}},
		{"wrong apiVersion", "apiVersion: virtcon/v2\nkind: VirtualMachine\n", []string{"apiVersion", `"virtcon/v2"`, "virtcon/v1"}},
		{"wrong kind", "apiVersion: virtcon/v1\nkind: Pod\n", []string{"kind", `"Pod"`, "VirtualMachine"}},
		{"kind is case-sensitive", "apiVersion: virtcon/v1\nkind: virtualmachine\n", []string{"kind", `"virtualmachine"`}},
		{"null document", "~\n", []string{"apiVersion"}},
		// 0 is refused where given: Defaults would read it as unset
		{"cpus 0", head + "metadata: {name: a}\nspec: {cpus: 0}\n", []string{"spec.cpus: must be at least 1", "(got 0)"}},
		{"cpus 0 in JSON", `{"apiVersion": "virtcon/v1", "kind": "VirtualMachine", "metadata": {"name": "a"}, "spec": {"cpus": 0}}`, []string{"spec.cpus: must be at least 1"}},
		{"memoryMiB 0", head + "metadata: {name: a}\nspec: {memoryMiB: 0}\n", []string{"spec.memoryMiB: must be at least 16"}},
		// every problem, not only the unknown field's (a vm edit shows them all)
		{"unknown field and bad values", head + "metadata: {name: a}\nspec: {cpu: 2, cpus: -1, memoryMiB: 1, disks: [{name: a, bus: sata}]}\n",
			[]string{"spec.cpu: unknown field", "spec.cpus: must be at least 1 (got -1)", "spec.memoryMiB: must be at least 16", "spec.disks[0].bus: unknown field"}},
		{"wrong type and a bad name", head + "metadata: {name: -a}\nspec: {cpus: many}\n", []string{"spec.cpus: must be an integer", "metadata.name: must be 1-63"}},
		{"wrong kind and a bad value", "apiVersion: virtcon/v1\nkind: Pod\nmetadata: {name: a}\nspec: {cpus: 300}\n", []string{`kind: want VirtualMachine (got "Pod")`, "spec.cpus: must be at most 255"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			vm, err := Decode([]byte(tt.in))
			if err == nil {
				t.Fatalf("Decode: got %+v, nil; want an error", vm)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("errors.Is(%v, ErrInvalid): got false; want true", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error: got %q; want it to contain %q", err, w)
				}
			}
			if n := strings.Count(err.Error(), "spec.cpus:"); n > 1 {
				t.Errorf("error: got %q; want spec.cpus named once", err)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   Spec
		want Spec
	}{
		{"disk boot gets uefi", Spec{Disks: []Disk{{Image: "img"}, {Name: "data", Size: "1G"}, {Size: "2G"}}},
			Spec{CPUs: 1, MemoryMiB: 512, Machine: "q35", Accel: "auto", Firmware: "uefi",
				Disks: []Disk{{Name: "disk0", Image: "img"}, {Name: "data", Size: "1G"}, {Name: "disk2", Size: "2G"}}}},
		{"kernel boot gets bios", Spec{Boot: &Boot{Kernel: "/k"}},
			Spec{CPUs: 1, MemoryMiB: 512, Machine: "q35", Accel: "auto", Firmware: "bios", Boot: &Boot{Kernel: "/k"}}},
		{"boot without kernel gets uefi", Spec{Boot: &Boot{}},
			Spec{CPUs: 1, MemoryMiB: 512, Machine: "q35", Accel: "auto", Firmware: "uefi", Boot: &Boot{}}},
		{"set values kept", Spec{CPUs: 3, MemoryMiB: 2048, Machine: "pc", Accel: "tcg", Firmware: "uefi", Boot: &Boot{Kernel: "/k"}},
			Spec{CPUs: 3, MemoryMiB: 2048, Machine: "pc", Accel: "tcg", Firmware: "uefi", Boot: &Boot{Kernel: "/k"}}},
		{"negative values kept for Validate", Spec{CPUs: -1, MemoryMiB: -1},
			Spec{CPUs: -1, MemoryMiB: -1, Machine: "q35", Accel: "auto", Firmware: "uefi"}},
		{"empty lists are no lists", Spec{Disks: []Disk{}, Network: []NIC{}},
			Spec{CPUs: 1, MemoryMiB: 512, Machine: "q35", Accel: "auto", Firmware: "uefi"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			vm := &VirtualMachine{Spec: tt.in}
			Defaults(vm)
			if !reflect.DeepEqual(vm.Spec, tt.want) {
				t.Errorf("got %+v; want %+v", vm.Spec, tt.want)
			}
			if vm.APIVersion != APIVersion || vm.Kind != Kind {
				t.Errorf("got %q %q; want %q %q", vm.APIVersion, vm.Kind, APIVersion, Kind)
			}
			again := *vm
			Defaults(&again)
			if !reflect.DeepEqual(again.Spec, vm.Spec) {
				t.Errorf("Defaults is not idempotent: got %+v; want %+v", again.Spec, vm.Spec)
			}
		})
	}
}

// validVM is a defaulted manifest that passes Validate with testLimits.
func validVM() *VirtualMachine {
	vm := &VirtualMachine{
		APIVersion: APIVersion, Kind: Kind,
		Metadata: Metadata{Name: "web", Labels: map[string]string{"app": "web"}},
		Spec:     Spec{Disks: []Disk{{Name: "root", Image: "debian-12", Size: "10G"}}},
	}
	Defaults(vm)
	return vm
}

var testLimits = Limits{CPUs: 4, MemoryMiB: 4096}

func TestValidateNames(t *testing.T) {
	t.Parallel()
	valid := []string{"a", "A", "7", "123", "web-01", "Web-01", "a-b-c", "x1y2z3", strings.Repeat("a", 63), "a" + strings.Repeat("-", 61) + "b"}
	invalid := []string{
		"", " ", "web 01", " web", "web ", "a/b", "/", "..", ".", "a..b", "a.b", "a,b", "a,debug-threads=on",
		`"web"`, "'web'", "a\x00b", "a\nb", "a\tb", "web\n", "\x7f", strings.Repeat("a", 64), "-web", "web-", "-",
		"wéb", "ßtraße", "web\u200b", "ｗｅｂ", "a_b", "a:b", "a=b", "a;b", "$(id)", "*",
	}
	for _, name := range valid {
		t.Run("valid/"+name, func(t *testing.T) {
			t.Parallel()
			vm := validVM()
			vm.Metadata.Name = name
			if err := Validate(vm, testLimits); err != nil {
				t.Errorf("Validate(name %q): got %v; want nil", name, err)
			}
			if fe := ValidateName("x", name); fe != nil {
				t.Errorf("ValidateName(%q): got %v; want nil", name, fe)
			}
		})
	}
	for _, name := range invalid {
		t.Run("invalid/"+strconv.Quote(name), func(t *testing.T) {
			t.Parallel()
			vm := validVM()
			vm.Metadata.Name = name
			checkFieldError(t, Validate(vm, testLimits), "metadata.name", strconv.Quote(name))
		})
	}
}

// checkFieldError asserts err is an admission error naming field and
// (the quoted form of) value.
func checkFieldError(t *testing.T, err error, field, value string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got nil error; want one naming %s and %s", field, value)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("errors.Is(%v, ErrInvalid): got false; want true", err)
	}
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error %T: got no *ValidationError; want one", err)
	}
	found := false
	for _, fe := range ve.Errs {
		if fe.Field == field {
			found = true
			if !strings.Contains(fe.Error(), value) {
				t.Errorf("field error: got %q; want it to contain %s", fe.Error(), value)
			}
		}
	}
	if !found {
		t.Errorf("error: got %q; want a field error for %s", err, field)
	}
	msg := err.Error()
	if !strings.Contains(msg, field+": ") || !strings.Contains(msg, value) {
		t.Errorf("error: got %q; want it to contain %q and %s", msg, field, value)
	}
}

func TestValidateFields(t *testing.T) {
	t.Parallel()
	errNoFile := errors.New("no such file")
	tests := []struct {
		name       string
		mutate     func(*VirtualMachine)
		lim        Limits
		noDefaults bool
		field      string
		value      string // as it must appear in the message
	}{
		{"negative cpus", func(v *VirtualMachine) { v.Spec.CPUs = -1 }, testLimits, false, "spec.cpus", "(got -1)"},
		{"zero cpus", func(v *VirtualMachine) { v.Spec.CPUs = 0 }, testLimits, true, "spec.cpus", "(got 0)"},
		{"too many cpus for qemu", func(v *VirtualMachine) { v.Spec.CPUs = 256 }, Limits{}, false, "spec.cpus", "(got 256)"},
		{"absurd cpus", func(v *VirtualMachine) { v.Spec.CPUs = 1 << 40 }, Limits{}, false, "spec.cpus", "(got 1099511627776)"},
		{"more cpus than the host", func(v *VirtualMachine) { v.Spec.CPUs = 5 }, testLimits, false, "spec.cpus", "(got 5)"},
		{"negative memory", func(v *VirtualMachine) { v.Spec.MemoryMiB = -512 }, testLimits, false, "spec.memoryMiB", "(got -512)"},
		{"zero memory", func(v *VirtualMachine) { v.Spec.MemoryMiB = 0 }, testLimits, true, "spec.memoryMiB", "(got 0)"},
		{"tiny memory", func(v *VirtualMachine) { v.Spec.MemoryMiB = 15 }, testLimits, false, "spec.memoryMiB", "(got 15)"},
		{"more memory than the host", func(v *VirtualMachine) { v.Spec.MemoryMiB = 4097 }, testLimits, false, "spec.memoryMiB", "(got 4097)"},
		{"absurd memory", func(v *VirtualMachine) { v.Spec.MemoryMiB = 1 << 50 }, testLimits, false, "spec.memoryMiB", "(got 1125899906842624)"},
		{"reserved label", func(v *VirtualMachine) { v.Metadata.Labels["virtcon.io/owner"] = "me" }, testLimits, false, "metadata.labels[virtcon.io/owner]", `"virtcon.io/owner"`},
		{"reserved label bare", func(v *VirtualMachine) { v.Metadata.Labels["virtcon.io/"] = "" }, testLimits, false, "metadata.labels[virtcon.io/]", `"virtcon.io/"`},
		{"label key with space", func(v *VirtualMachine) { v.Metadata.Labels["my app"] = "x" }, testLimits, false, "metadata.labels[my app]", `"my app"`},
		{"label key two slashes", func(v *VirtualMachine) { v.Metadata.Labels["a/b/c"] = "x" }, testLimits, false, "metadata.labels[a/b/c]", `"a/b/c"`},
		{"label key empty", func(v *VirtualMachine) { v.Metadata.Labels[""] = "x" }, testLimits, false, "metadata.labels[]", `""`},
		{"label key leading dash", func(v *VirtualMachine) { v.Metadata.Labels["-a"] = "x" }, testLimits, false, "metadata.labels[-a]", `"-a"`},
		{"label key upper-case prefix", func(v *VirtualMachine) { v.Metadata.Labels["Example.com/a"] = "x" }, testLimits, false, "metadata.labels[Example.com/a]", `"Example.com/a"`},
		{"label key too long", func(v *VirtualMachine) { v.Metadata.Labels[strings.Repeat("k", 64)] = "x" }, testLimits, false, "metadata.labels[" + strings.Repeat("k", 64) + "]", strconv.Quote(strings.Repeat("k", 64))},
		{"label value with space", func(v *VirtualMachine) { v.Metadata.Labels["app"] = "a b" }, testLimits, false, "metadata.labels[app]", `"a b"`},
		{"label value newline", func(v *VirtualMachine) { v.Metadata.Labels["app"] = "a\n" }, testLimits, false, "metadata.labels[app]", `"a\n"`},
		{"label value too long", func(v *VirtualMachine) { v.Metadata.Labels["app"] = strings.Repeat("v", 64) }, testLimits, false, "metadata.labels[app]", strconv.Quote(strings.Repeat("v", 64))},
		{"label value trailing dot", func(v *VirtualMachine) { v.Metadata.Labels["app"] = "v." }, testLimits, false, "metadata.labels[app]", `"v."`},
		{"firmware", func(v *VirtualMachine) { v.Spec.Firmware = "efi" }, testLimits, false, "spec.firmware", `"efi"`},
		{"firmware case", func(v *VirtualMachine) { v.Spec.Firmware = "UEFI" }, testLimits, false, "spec.firmware", `"UEFI"`},
		{"accel", func(v *VirtualMachine) { v.Spec.Accel = "hvf" }, testLimits, false, "spec.accel", `"hvf"`},
		{"accel with options", func(v *VirtualMachine) { v.Spec.Accel = "kvm,thread=multi" }, testLimits, false, "spec.accel", `"kvm,thread=multi"`},
		{"machine", func(v *VirtualMachine) { v.Spec.Machine = "pc" }, testLimits, false, "spec.machine", `"pc"`},
		{"machine with options", func(v *VirtualMachine) { v.Spec.Machine = "q35,accel=kvm" }, testLimits, false, "spec.machine", `"q35,accel=kvm"`},
		{"disk without image or size", func(v *VirtualMachine) { v.Spec.Disks = append(v.Spec.Disks, Disk{Name: "data"}) }, testLimits, false, "spec.disks[1]", `"data"`},
		{"disk bad name", func(v *VirtualMachine) { v.Spec.Disks[0].Name = "../root" }, testLimits, false, "spec.disks[0].name", `"../root"`},
		{"disk name with comma", func(v *VirtualMachine) { v.Spec.Disks[0].Name = "r,file=/etc/shadow" }, testLimits, false, "spec.disks[0].name", `"r,file=/etc/shadow"`},
		{"disk bad image", func(v *VirtualMachine) { v.Spec.Disks[0].Image = "../../etc/shadow" }, testLimits, false, "spec.disks[0].image", `"../../etc/shadow"`},
		{"disk size unit", func(v *VirtualMachine) { v.Spec.Disks[0].Size = "10X" }, testLimits, false, "spec.disks[0].size", `"10X"`},
		{"disk size negative", func(v *VirtualMachine) { v.Spec.Disks[0].Size = "-1G" }, testLimits, false, "spec.disks[0].size", `"-1G"`},
		{"disk size fraction of a byte", func(v *VirtualMachine) { v.Spec.Disks[0].Size = "1.0000001G" }, testLimits, false, "spec.disks[0].size", `"1.0000001G"`},
		{"disk size below 1M", func(v *VirtualMachine) { v.Spec.Disks[0].Size = "1023K" }, testLimits, false, "spec.disks[0].size", `"1023K"`},
		{"disk size zero", func(v *VirtualMachine) { v.Spec.Disks[0].Size = "0" }, testLimits, false, "spec.disks[0].size", `"0"`},
		{"disk size huge", func(v *VirtualMachine) { v.Spec.Disks[0].Size = "9000T" }, testLimits, false, "spec.disks[0].size", `"9000T"`},
		{"disk size unit only", func(v *VirtualMachine) { v.Spec.Disks[0].Size = "G" }, testLimits, false, "spec.disks[0].size", `"G"`},
		{"duplicate disk", func(v *VirtualMachine) { v.Spec.Disks = append(v.Spec.Disks, Disk{Name: "root", Size: "1G"}) }, testLimits, false, "spec.disks[1].name", `"root"`},
		{"duplicate disk case", func(v *VirtualMachine) { v.Spec.Disks = append(v.Spec.Disks, Disk{Name: "ROOT", Size: "1G"}) }, testLimits, false, "spec.disks[1].name", `"ROOT"`},
		{"boot without kernel", func(v *VirtualMachine) { v.Spec.Boot = &Boot{Initrd: "/boot/initrd"} }, testLimits, false, "spec.boot.kernel", `(got "")`},
		{"relative kernel", func(v *VirtualMachine) { v.Spec.Boot = &Boot{Kernel: "vmlinuz"} }, testLimits, false, "spec.boot.kernel", `"vmlinuz"`},
		{"dot-relative kernel", func(v *VirtualMachine) { v.Spec.Boot = &Boot{Kernel: "./boot/vmlinuz"} }, testLimits, false, "spec.boot.kernel", `"./boot/vmlinuz"`},
		{"relative initrd", func(v *VirtualMachine) { v.Spec.Boot = &Boot{Kernel: "/k", Initrd: "initrd.img"} }, testLimits, false, "spec.boot.initrd", `"initrd.img"`},
		{"kernel missing", func(v *VirtualMachine) { v.Spec.Boot = &Boot{Kernel: "/boot/nope"} },
			Limits{FileExists: func(p string) error { return errNoFile }}, false, "spec.boot.kernel", `"/boot/nope"`},
		{"initrd missing", func(v *VirtualMachine) { v.Spec.Boot = &Boot{Kernel: "/k", Initrd: "/boot/nope"} },
			Limits{FileExists: func(p string) error {
				if p == "/k" {
					return nil
				}
				return errNoFile
			}}, false, "spec.boot.initrd", `"/boot/nope"`},
		{"nothing to boot", func(v *VirtualMachine) { v.Spec.Disks = []Disk{{Name: "data", Size: "1G"}} }, testLimits, false, "spec", "nothing to boot"},
		{"nic with bridge and network", func(v *VirtualMachine) { v.Spec.Network = []NIC{{Bridge: "br0", Network: "lan", Model: "virtio"}} }, testLimits, false, "spec.network[0]", `"br0lan"`},
		{"nic with neither", func(v *VirtualMachine) { v.Spec.Network = []NIC{{Model: "virtio"}} }, testLimits, false, "spec.network[0]", "exactly one"},
		{"nic on network none", func(v *VirtualMachine) { v.Spec.Network = []NIC{{Network: "None", Model: "virtio"}} }, testLimits, false, "spec.network[0].network", `is no network: leave spec.network out for QEMU user-mode networking (outbound only) (got "None")`},
		{"nic bridge name too long", func(v *VirtualMachine) { v.Spec.Network = []NIC{{Bridge: "br-0123456789abcdef", Model: "virtio"}} }, testLimits, false, "spec.network[0].bridge", `"br-0123456789abcdef"`},
		{"nic multicast mac", func(v *VirtualMachine) {
			v.Spec.Network = []NIC{{Bridge: "br0", MAC: "01:00:5e:00:00:01", Model: "virtio"}}
		}, testLimits, false, "spec.network[0].mac", `"01:00:5e:00:00:01"`},
		{"nic bad mac", func(v *VirtualMachine) {
			v.Spec.Network = []NIC{{Bridge: "br0", MAC: "52:54:00:zz:00:01", Model: "virtio"}}
		}, testLimits, false, "spec.network[0].mac", `"52:54:00:zz:00:01"`},
		{"nic model", func(v *VirtualMachine) { v.Spec.Network = []NIC{{Network: "lan", Model: "rtl8139"}} }, testLimits, false, "spec.network[0].model", `"rtl8139"`},
		{"uid not a uuid", func(v *VirtualMachine) { v.Metadata.UID = "web" }, testLimits, false, "metadata.uid", `"web"`},
		{"uid braces", func(v *VirtualMachine) { v.Metadata.UID = "{123e4567-e89b-12d3-a456-426614174000}" }, testLimits, false, "metadata.uid", `"{123e4567-e89b-12d3-a456-426614174000}"`},
		{"uid urn", func(v *VirtualMachine) { v.Metadata.UID = "urn:uuid:123e4567-e89b-12d3-a456-426614174000" }, testLimits, false, "metadata.uid", `"urn:uuid:123e4567-e89b-12d3-a456-426614174000"`},
		{"uid without dashes", func(v *VirtualMachine) { v.Metadata.UID = "123e4567e89b12d3a456426614174000" }, testLimits, false, "metadata.uid", `"123e4567e89b12d3a456426614174000"`},
		{"uid path", func(v *VirtualMachine) { v.Metadata.UID = "../../../../../../etc/passwd/xxxxx" }, testLimits, false, "metadata.uid", `"../../../../../../etc/passwd/xxxxx"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			vm := validVM()
			tt.mutate(vm)
			if !tt.noDefaults {
				Defaults(vm)
			}
			checkFieldError(t, Validate(vm, tt.lim), tt.field, tt.value)
		})
	}
}

func TestValidateAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(*VirtualMachine)
		lim    Limits
	}{
		{"as built", func(*VirtualMachine) {}, testLimits},
		{"host maximum", func(v *VirtualMachine) { v.Spec.CPUs, v.Spec.MemoryMiB = 4, 4096 }, testLimits},
		{"unknown host", func(v *VirtualMachine) { v.Spec.CPUs, v.Spec.MemoryMiB = 255, 1<<20 }, Limits{}},
		{"minimum memory", func(v *VirtualMachine) { v.Spec.MemoryMiB = 16 }, testLimits},
		{"kernel boot only", func(v *VirtualMachine) {
			v.Spec.Disks = nil
			v.Spec.Boot = &Boot{Kernel: "/boot/vmlinuz", Initrd: "/boot/initrd.img", Cmdline: "console=ttyS0 root=/dev/vda1,x"}
		}, Limits{FileExists: func(string) error { return nil }}},
		{"blank disk next to kernel", func(v *VirtualMachine) {
			v.Spec.Disks = []Disk{{Name: "scratch", Size: "1M"}}
			v.Spec.Boot = &Boot{Kernel: "/k"}
		}, testLimits},
		{"overlay without size", func(v *VirtualMachine) { v.Spec.Disks[0].Size = "" }, testLimits},
		{"upper-case uid", func(v *VirtualMachine) { v.Metadata.UID = "123E4567-E89B-12D3-A456-426614174000" }, testLimits},
		{"labels", func(v *VirtualMachine) {
			v.Metadata.Labels = map[string]string{"a": "", "example.com/a_b.c-d": "V_1.2-3", "virtcon.io": "x", strings.Repeat("k", 63): strings.Repeat("v", 63)}
		}, testLimits},
		{"explicit values", func(v *VirtualMachine) { v.Spec.Firmware, v.Spec.Accel = "bios", "tcg" }, testLimits},
		{"accel kvm", func(v *VirtualMachine) { v.Spec.Accel = "kvm" }, testLimits},
		{"disk sizes", func(v *VirtualMachine) {
			v.Spec.Disks = append(v.Spec.Disks, Disk{Name: "b", Size: "1048576"}, Disk{Name: "c", Size: "2GiB"}, Disk{Name: "d", Size: "1t"})
		}, testLimits},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			vm := validVM()
			tt.mutate(vm)
			Defaults(vm)
			if err := Validate(vm, tt.lim); err != nil {
				t.Errorf("Validate: got %v; want nil", err)
			}
		})
	}
}

func TestValidateReportsEveryError(t *testing.T) {
	t.Parallel()
	vm := validVM()
	vm.Metadata.Name = "bad name"
	vm.Spec.CPUs = -1
	vm.Spec.Accel = "x"
	vm.Spec.Disks = []Disk{{Name: "d"}}
	err := Validate(vm, testLimits)
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("got %v; want a *ValidationError", err)
	}
	var got []string
	for _, fe := range ve.Errs {
		got = append(got, fe.Field)
	}
	want := []string{"metadata.name", "spec.cpus", "spec.accel", "spec.disks[0]", "spec"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("fields: got %q; want %q", got, want)
	}
}

func TestParseMemoryMiB(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want int // 0: an error
	}{
		{"512", 512}, {"512M", 512}, {"1G", 1024}, {"1Gi", 1024}, {"1GiB", 1024}, {"1.5G", 1536}, {"2g", 2048},
		{"16", 16}, {"16M", 16},
		{"64K", 0}, {"15", 0}, {"0", 0}, {"1000K", 0}, {"1.0000001G", 0}, {"", 0}, {"lots", 0}, {"-1", 0}, {"17T", 0},
	}
	for _, tt := range tests {
		got, err := ParseMemoryMiB(tt.in)
		if (err != nil) != (tt.want == 0) || got != tt.want {
			t.Errorf("ParseMemoryMiB(%q): got %d, %v; want %d", tt.in, got, err, tt.want)
		}
		if err != nil && !strings.Contains(err.Error(), strconv.Quote(tt.in)) {
			t.Errorf("ParseMemoryMiB(%q): error %q does not quote the value", tt.in, err)
		}
	}
	if _, err := ParseMemoryMiB("64K"); err == nil || !strings.Contains(err.Error(), "16 MiB") {
		t.Errorf("ParseMemoryMiB(64K): got %v; want it to name the minimum", err)
	}
}

func TestParseSize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"0", 0, false},
		{"1024", 1024, false},
		{"10B", 10, false},
		{"1K", 1 << 10, false},
		{"1k", 1 << 10, false},
		{"1KiB", 1 << 10, false},
		{"512M", 512 << 20, false},
		{"512MB", 512 << 20, false},
		{"10G", 10 << 30, false},
		{"10g", 10 << 30, false},
		{"10GiB", 10 << 30, false},
		{"10gib", 10 << 30, false},
		{"10GB", 10 << 30, false},
		{" 2G ", 2 << 30, false},
		{"1T", 1 << 40, false},
		{"8192T", 1 << 53, false},
		{"9007199254740992", 1 << 53, false},
		{"", 0, true},
		{"G", 0, true},
		{"GiB", 0, true},
		{"-1", 0, true},
		{"-1G", 0, true},
		{"1.5G", 3 << 29, false},
		{"1Gi", 1 << 30, false},
		{"0.5K", 512, false},
		{"1.0001K", 0, true},
		{"1.", 0, true},
		{".5G", 0, true},
		{"1,5G", 0, true},
		{"Ki", 0, true},
		{"10i", 0, true},
		{"10X", 0, true},
		{"10 G", 0, true},
		{"1P", 0, true},
		{"0x10", 0, true},
		{"1e9", 0, true},
		{"abc", 0, true},
		{"8193T", 0, true},
		{"9007199254740993", 0, true},
		{"99999999999999999999", 0, true},
		{"1GG", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseSize(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseSize(%q): got err %v; want error %v", tt.in, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("ParseSize(%q): got %d; want %d", tt.in, got, tt.want)
			}
			if err != nil && !strings.Contains(err.Error(), strconv.Quote(tt.in)) {
				t.Errorf("error: got %q; want it to quote %q", err, tt.in)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		validYAML, validJSON, validYAML + "---\n", "",
		"apiVersion: virtcon/v1\nkind: VirtualMachine\nmetadata: {name: a}\nspec: {boot: {kernel: /k}, disks: [], network: []}\n",
		"apiVersion: virtcon/v1\nkind: VirtualMachine\nmetadata: {name: a, labels: {}}\nspec: {boot: {kernel: /k}, cloudInit: {}}\n",
		"apiVersion: virtcon/v1\nkind: VirtualMachine\nmetadata: {name: a}\nspec: {boot: {kernel: /k, cmdline: \"a\\tb\\n c \"}, cloudInit: {userData: \"x\\n  y \\n\", metaData: \"\\u00e9\"}}\n",
		"apiVersion: virtcon/v1\nkind: VirtualMachine\nmetadata: {name: a}\nspec: {cpus: 0x2, memoryMiB: 0o1000, boot: {kernel: /k}}\n",
		"apiVersion: virtcon/v1\nkind: VirtualMachine\nmetadata: &m {name: a}\nstatus: *m\n",
		"apiVersion: virtcon/v1\nkind: VirtualMachine\nmetadata: {name: a}\nspec: {cpus: many}\n",
		"apiVersion: virtcon/v1\nkind: VirtualMachine\nmetadata: {name: a}\n---\nb: 1\n",
		"apiVersion: virtcon/v1\nkind: VirtualMachine\nmetadata: {name: a}\nspec: {boot: {kernel: /k, cmdline: \"\\tx\\n\"}, cloudInit: {userData: \"\\t#cloud-config\\n\"}}\n",
		"apiVersion: virtcon/v1\nkind: VirtualMachine\nmetadata: {name: a}\nspec: {boot: {kernel: /k}, cloudInit: {userData: \"\\x7f\\x85\\u2028\\ufeff\\t\\n\"}}\n",
		"- 1\n- 2\n", "{", "a: &a [*a]\n", "\xff\xfe",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		vm, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Decode error %v: got errors.Is(ErrInvalid) false; want true", err)
			}
			return
		}
		Defaults(vm)
		if Validate(vm, Limits{}) != nil {
			return
		}
		// encodeVM is yaml.Marshal as the store writes it (with its
		// fallback for what yaml.v3 cannot read back).
		b, err := encodeVM(vm)
		if err != nil {
			t.Fatalf("encodeVM: got %v; want nil", err)
		}
		again, err := Decode(b)
		if err != nil {
			t.Fatalf("Decode(Marshal(vm)): got %v; want nil\n%s", err, b)
		}
		if !reflect.DeepEqual(again.Spec, vm.Spec) {
			t.Fatalf("round trip: got spec %#v; want %#v\n%s", again.Spec, vm.Spec, b)
		}
		if again.Metadata.Name != vm.Metadata.Name || !reflect.DeepEqual(again.Metadata.Labels, vm.Metadata.Labels) {
			t.Fatalf("round trip: got metadata %#v; want %#v", again.Metadata, vm.Metadata)
		}
		if err := Validate(again, Limits{}); err != nil {
			t.Fatalf("Validate(round trip): got %v; want nil", err)
		}
	})
}
