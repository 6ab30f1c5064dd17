package api

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	directorv1 "github.com/virtcon/virtcon/api/directorv1"
)

// wantProtoc is the protoc the committed code was generated with: its
// version is in every generated file's header.
const wantProtoc = "libprotoc 3.21.12"

// The committed generated code is what scripts/proto.sh makes from the
// .proto files now: a .proto edited without `make proto` fails here, as
// does a generated file no .proto produces. Without protoc 3.21.12 it
// skips, except under CI (which installs it), where it fails.
func TestGeneratedCodeIsFresh(t *testing.T) {
	out, err := exec.Command("protoc", "--version").Output()
	if v := strings.TrimSpace(string(out)); err != nil || v != wantProtoc {
		msg := "needs protoc (" + wantProtoc + ", Debian's protobuf-compiler) to regenerate the API code; have " + strings.TrimSpace(v)
		if err != nil {
			msg += " (" + err.Error() + ")"
		}
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	tmp := t.TempDir()
	cmd := exec.Command("sh", "../scripts/proto.sh", tmp)
	cmd.Env = append(os.Environ(), "PROTO_TOOLS="+filepath.Join(tmp, ".tools"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/proto.sh: %v\n%s", err, b)
	}
	fresh := generated(t, filepath.Join(tmp, "api"))
	committed := generated(t, ".")
	for name, want := range fresh {
		got, ok := committed[name]
		switch {
		case !ok:
			t.Errorf("api/%s is missing: run make proto", name)
		case !bytes.Equal(got, want):
			t.Errorf("api/%s is stale: run make proto", name)
		}
	}
	for name := range committed {
		if _, ok := fresh[name]; !ok {
			t.Errorf("api/%s is generated code that no .proto makes: remove it", name)
		}
	}
}

// generated reads the generated Go files under dir, keyed by their path
// relative to it.
func generated(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".tools" {
			return filepath.SkipDir
		}
		if d.IsDir() || !(strings.HasSuffix(p, ".pb.go") || strings.HasSuffix(p, ".connect.go")) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		files[rel] = b
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// taskKinds are the messages a Task's oneof may hold: each a typed
// operation the agent hands to a host service. A new kind is added here
// on purpose, after reading its fields.
var taskKinds = []protoreflect.FullName{
	"virtcon.director.v1.CreateVM",
	"virtcon.director.v1.StartVM",
	"virtcon.director.v1.StopVM",
	"virtcon.director.v1.RebootVM",
	"virtcon.director.v1.DeleteVM",
	"virtcon.director.v1.PullImage",
	"virtcon.director.v1.ApplyNetwork",
	"virtcon.director.v1.CollectDiagnostics",
}

// taskTextFields are the string and bytes fields a task may carry, by
// their message-qualified names: a name or UID, a URL, a digest, an
// opaque label value, and two manifests that the host's own admission
// decodes (never run). Free text anywhere else could smuggle a command.
var taskTextFields = []protoreflect.FullName{
	"virtcon.director.v1.Task.id",
	"virtcon.director.v1.CreateVM.manifest",
	"virtcon.director.v1.CreateVM.director_generation",
	"virtcon.director.v1.StartVM.vm",
	"virtcon.director.v1.StopVM.vm",
	"virtcon.director.v1.RebootVM.vm",
	"virtcon.director.v1.DeleteVM.vm",
	"virtcon.director.v1.PullImage.url",
	"virtcon.director.v1.PullImage.name",
	"virtcon.director.v1.PullImage.sha256",
	"virtcon.director.v1.ApplyNetwork.host_network",
	"virtcon.director.v1.CancelTask.task_id",
}

// commandWords may not be a field's or oneof's name, nor a word of one
// (shell_command, env_vars).
var commandWords = []string{"command", "cmd", "commands", "args", "argv", "arg", "shell", "script", "exec", "env", "environment"}

// commandProblems walks md and every message it reaches (fields, oneofs,
// map entries) and says what breaks the rules: a forbidden name, a
// oneof member that is not an allowed kind, a string or bytes field
// that is not on the allow-list.
func commandProblems(md protoreflect.MessageDescriptor, kinds, text []protoreflect.FullName) []string {
	var problems []string
	seen := map[protoreflect.FullName]bool{}
	badName := func(name protoreflect.Name) bool {
		for _, w := range strings.Split(strings.ToLower(string(name)), "_") {
			if slices.Contains(commandWords, w) {
				return true
			}
		}
		return false
	}
	var walk func(md protoreflect.MessageDescriptor)
	walk = func(md protoreflect.MessageDescriptor) {
		if seen[md.FullName()] {
			return
		}
		seen[md.FullName()] = true
		oneofs := md.Oneofs()
		for i := 0; i < oneofs.Len(); i++ {
			o := oneofs.Get(i)
			if badName(o.Name()) {
				problems = append(problems, fmt.Sprintf("oneof %s is named like a command", o.FullName()))
			}
			if o.IsSynthetic() {
				continue
			}
			fields := o.Fields()
			for j := 0; j < fields.Len(); j++ {
				f := fields.Get(j)
				if f.Kind() != protoreflect.MessageKind || !slices.Contains(kinds, f.Message().FullName()) {
					problems = append(problems, fmt.Sprintf("oneof %s: member %s is not an allowed task kind", o.FullName(), f.Name()))
				}
			}
		}
		fields := md.Fields()
		for i := 0; i < fields.Len(); i++ {
			f := fields.Get(i)
			if badName(f.Name()) {
				problems = append(problems, fmt.Sprintf("field %s is named like a command", f.FullName()))
			}
			switch f.Kind() {
			case protoreflect.StringKind, protoreflect.BytesKind:
				if !slices.Contains(text, f.FullName()) {
					problems = append(problems, fmt.Sprintf("%s field %s is not on the allow-list", f.Kind(), f.FullName()))
				}
			case protoreflect.MessageKind, protoreflect.GroupKind:
				walk(f.Message())
			}
		}
	}
	walk(md)
	slices.Sort(problems)
	return problems
}

// A director's task can only name an operation and its typed inputs:
// no message reachable from Task (or CancelTask) has a command, argv,
// shell, script or environment field, every oneof member is a known
// kind, and every string or bytes field is on the allow-list.
func TestTaskHasNoCommand(t *testing.T) {
	for _, m := range []proto.Message{&directorv1.Task{}, &directorv1.CancelTask{}} {
		md := m.ProtoReflect().Descriptor()
		if p := commandProblems(md, taskKinds, taskTextFields); len(p) > 0 {
			t.Errorf("%s:\n  %s", md.FullName(), strings.Join(p, "\n  "))
		}
	}
	// every kind on the allow-list is a member of Task's oneof: the list
	// says what is there, not what once was
	kind := (&directorv1.Task{}).ProtoReflect().Descriptor().Oneofs().ByName("kind")
	if kind == nil {
		t.Fatal("Task has no oneof kind")
	}
	var members []protoreflect.FullName
	for i := 0; i < kind.Fields().Len(); i++ {
		members = append(members, kind.Fields().Get(i).Message().FullName())
	}
	for _, k := range taskKinds {
		if !slices.Contains(members, k) {
			t.Errorf("allowed kind %s is not in Task.kind", k)
		}
	}
}

// The walk finds what it is there to find: synthetic Tasks that break
// each rule, nested and behind a map, are reported.
func TestCommandProblemsCatches(t *testing.T) {
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
	msg := descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	rep := descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	field := func(name string, n int32, typ *descriptorpb.FieldDescriptorProto_Type, typeName string, oneof *int32) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n), Type: typ, Label: opt, OneofIndex: oneof}
		if typeName != "" {
			f.TypeName = proto.String(typeName)
		}
		return f
	}
	tests := []struct {
		name   string
		task   []*descriptorpb.FieldDescriptorProto
		nested []*descriptorpb.DescriptorProto
		want   []string // each in one problem
	}{
		{"clean", nil, nil, nil},
		{"a command field", []*descriptorpb.FieldDescriptorProto{field("command", 3, str, "", nil)},
			nil, []string{"t.Task.command is named like a command", "t.Task.command is not on the allow-list"}},
		{"a word of one", []*descriptorpb.FieldDescriptorProto{field("pre_script", 3, msg, ".t.StartVM", nil)},
			nil, []string{"t.Task.pre_script is named like a command"}},
		{"free text", []*descriptorpb.FieldDescriptorProto{field("note", 3, str, "", nil)},
			nil, []string{"string field t.Task.note is not on the allow-list"}},
		{"an unknown kind", []*descriptorpb.FieldDescriptorProto{field("run", 11, msg, ".t.Run", proto.Int32(0))},
			[]*descriptorpb.DescriptorProto{{Name: proto.String("Run"), Field: []*descriptorpb.FieldDescriptorProto{field("vm", 1, str, "", nil)}}},
			[]string{"member run is not an allowed task kind", "t.Run.vm is not on the allow-list"}},
		{"a scalar member", []*descriptorpb.FieldDescriptorProto{field("vm", 11, str, "", proto.Int32(0))},
			nil, []string{"member vm is not an allowed task kind"}},
		{"nested argv", []*descriptorpb.FieldDescriptorProto{field("x", 3, msg, ".t.Extra", nil)},
			[]*descriptorpb.DescriptorProto{{Name: proto.String("Extra"), Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("argv"), Number: proto.Int32(1), Type: str, Label: rep}}}},
			[]string{"t.Extra.argv is named like a command"}},
		{"env behind a map", []*descriptorpb.FieldDescriptorProto{{Name: proto.String("env"), Number: proto.Int32(3), Type: msg, Label: rep,
			TypeName: proto.String(".t.Task.EnvEntry")}}, nil, []string{"t.Task.env is named like a command", "t.Task.EnvEntry.key is not on the allow-list"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := []*descriptorpb.FieldDescriptorProto{field("id", 1, str, "", nil), field("start_vm", 10, msg, ".t.StartVM", proto.Int32(0))}
			task := &descriptorpb.DescriptorProto{Name: proto.String("Task"), Field: append(base, tc.task...),
				OneofDecl: []*descriptorpb.OneofDescriptorProto{{Name: proto.String("kind")}}}
			if tc.name == "env behind a map" {
				task.NestedType = []*descriptorpb.DescriptorProto{{Name: proto.String("EnvEntry"), Options: &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)},
					Field: []*descriptorpb.FieldDescriptorProto{field("key", 1, str, "", nil), field("value", 2, str, "", nil)}}}
			}
			fdp := &descriptorpb.FileDescriptorProto{Name: proto.String("t.proto"), Package: proto.String("t"), Syntax: proto.String("proto3"),
				MessageType: append([]*descriptorpb.DescriptorProto{task, {Name: proto.String("StartVM"),
					Field: []*descriptorpb.FieldDescriptorProto{field("vm", 1, str, "", nil)}}}, tc.nested...)}
			fd, err := protodesc.NewFile(fdp, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := commandProblems(fd.Messages().ByName("Task"), []protoreflect.FullName{"t.StartVM"}, []protoreflect.FullName{"t.Task.id", "t.StartVM.vm"})
			for _, w := range tc.want {
				if !slices.ContainsFunc(got, func(p string) bool { return strings.Contains(p, w) }) {
					t.Errorf("problems %q; want one saying %q", got, w)
				}
			}
			if len(tc.want) == 0 && len(got) > 0 {
				t.Errorf("problems %q; want none", got)
			}
		})
	}
}
