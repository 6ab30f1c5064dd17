package taskkind

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/virtcon/virtcon/api/directorv1"
)

// Every member of Task's kind oneof has a name, each its own, in All.
func TestEveryKindNamed(t *testing.T) {
	oneof := (&directorv1.Task{}).ProtoReflect().Descriptor().Oneofs().ByName("kind")
	if oneof == nil {
		t.Fatal("Task has no oneof kind")
	}
	seen := map[string]bool{}
	for i := 0; i < oneof.Fields().Len(); i++ {
		f := oneof.Fields().Get(i)
		task := &directorv1.Task{}
		m := task.ProtoReflect()
		m.Set(f, protoreflect.ValueOfMessage(m.NewField(f).Message()))
		name := Of(task)
		if name == "" || seen[name] {
			t.Errorf("oneof member %s: kind %q (empty or taken twice)", f.Name(), name)
		}
		seen[name] = true
	}
	if len(All) != len(seen) {
		t.Errorf("All has %d kinds, the oneof %d", len(All), len(seen))
	}
	for _, k := range All {
		if !seen[k] {
			t.Errorf("All names %q, no oneof member is it", k)
		}
	}
	if Of(&directorv1.Task{}) != "" || Of(nil) != "" {
		t.Error("a task without a kind has a name")
	}
}
