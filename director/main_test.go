package director_test

import (
	"testing"

	"github.com/virtcon/virtcon/director/directortest"
)

func TestMain(m *testing.M) { directortest.Main(m) }
