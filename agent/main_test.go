package agent

import (
	"testing"

	"github.com/virtcon/virtcon/director/directortest"
	"github.com/virtcon/virtcon/internal/reexec"
)

func TestMain(m *testing.M) {
	reexec.Init()
	directortest.Main(m)
}
