package enroll

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

const (
	testID     = "ab12cd34"
	testSecret = "s3cr3tvalue0123456789abcdefghijk"
	testPin    = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

func TestParseJoinRoundTrip(t *testing.T) {
	tests := []struct {
		name, in        string
		addr, host, pin string
		format, masked  string
	}{
		{
			name: "dns name", in: "vcj1:" + testID + "." + testSecret + "@director.example.com:9443#" + testPin,
			addr: "director.example.com:9443", host: "director.example.com", pin: testPin,
		},
		{
			name: "ipv4", in: "vcj1:" + testID + "." + testSecret + "@192.0.2.7:9443#" + testPin,
			addr: "192.0.2.7:9443", host: "192.0.2.7", pin: testPin,
		},
		{
			name: "ipv6", in: "vcj1:" + testID + "." + testSecret + "@[2001:db8::1]:443#" + testPin,
			addr: "[2001:db8::1]:443", host: "2001:db8::1", pin: testPin,
		},
		{
			name: "no pin", in: "vcj1:" + testID + "." + testSecret + "@director:1",
			addr: "director:1", host: "director",
		},
		{
			name: "white space and newline trimmed", in: "  vcj1:" + testID + "." + testSecret + "@h.test:65535#" + testPin + "\n",
			addr: "h.test:65535", host: "h.test", pin: testPin,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j, err := ParseJoin(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if j.ID() != testID || j.Secret() != testSecret || j.Token() != testID+"."+testSecret {
				t.Errorf("got id %q token %q; want %q and the secret", j.ID(), j.Token(), testID)
			}
			if j.Addr() != tt.addr || j.Host() != tt.host || j.Pin() != tt.pin {
				t.Errorf("got addr %q host %q pin %q; want %q %q %q", j.Addr(), j.Host(), j.Pin(), tt.addr, tt.host, tt.pin)
			}
			if got, want := j.Format(), strings.TrimSpace(tt.in); got != want {
				t.Errorf("Format() = %q; want %q", got, want)
			}
			again, err := ParseJoin(j.Format())
			if err != nil || again != j {
				t.Errorf("ParseJoin(Format()) = %v, %v; want %v", again, err, j)
			}
			nj, err := NewJoin(testID, testSecret, tt.addr, tt.pin)
			if err != nil || nj != j {
				t.Errorf("NewJoin = %v, %v; want %v", nj, err, j)
			}
			wantMasked := "vcj1:" + testID + ".********@" + tt.addr
			if tt.pin != "" {
				wantMasked += "#" + tt.pin
			}
			if got := j.String(); got != wantMasked {
				t.Errorf("String() = %q; want %q", got, wantMasked)
			}
		})
	}
}

func TestJoinMasked(t *testing.T) {
	j, err := NewJoin(testID, testSecret, "director:9443", testPin)
	if err != nil {
		t.Fatal(err)
	}
	var text, json bytes.Buffer
	for _, h := range []slog.Handler{slog.NewTextHandler(&text, nil), slog.NewJSONHandler(&json, nil)} {
		slog.New(h).Info("enrol", "join", j, slog.Any("any", j), slog.Group("g", "join", j))
	}
	outputs := map[string]string{
		"String":        j.String(),
		"%v":            fmt.Sprintf("%v", j),
		"%+v":           fmt.Sprintf("%+v", j),
		"%#v":           fmt.Sprintf("%#v", j),
		"%s %q":         fmt.Sprintf("%s %q", j, j),
		"ptr %v":        fmt.Sprintf("%v", &j),
		"ptr %+v":       fmt.Sprintf("%+v", &j),
		"ptr %#v":       fmt.Sprintf("%#v", &j),
		"in struct %+v": fmt.Sprintf("%+v", struct{ J Join }{j}),
		"in slice %v":   fmt.Sprint([]Join{j}),
		"slog text":     text.String(),
		"slog json":     json.String(),
	}
	for name, got := range outputs {
		if strings.Contains(got, testSecret) {
			t.Errorf("%s shows the secret: %s", name, got)
		}
		if !strings.Contains(got, testID) {
			t.Errorf("%s lost the id: %s", name, got)
		}
	}
}

func TestParseJoinRefused(t *testing.T) {
	good := func(id, secret, addr, pin string) string {
		s := "vcj1:" + id + "." + secret + "@" + addr
		if pin != "" {
			s += "#" + pin
		}
		return s
	}
	tests := []struct {
		name, in, part string
	}{
		{"empty", "", "prefix"},
		{"no prefix", testID + "." + testSecret + "@h:1", "prefix"},
		{"other version", "vcj2:" + testID + "." + testSecret + "@h:1", "prefix"},
		{"upper-case prefix", "VCJ1:" + testID + "." + testSecret + "@h:1", "prefix"},
		{"no address", "vcj1:" + testID + "." + testSecret, "address"},
		{"no dot", "vcj1:" + testSecret + "@h:1", "id"},
		{"id short", good("ab12cd3", testSecret, "h:1", ""), "id"},
		{"id long", good("ab12cd345", testSecret, "h:1", ""), "id"},
		{"id upper", good("AB12CD34", testSecret, "h:1", ""), "id"},
		{"secret short", good(testID, testSecret[1:], "h:1", ""), "secret"},
		{"secret long", good(testID, testSecret+"x", "h:1", ""), "secret"},
		{"secret upper", good(testID, strings.ToUpper(testSecret), "h:1", ""), "secret"},
		{"secret charset", good(testID, testSecret[:31]+"-", "h:1", ""), "secret"},
		{"secret with dot", good(testID, testSecret[:16]+"."+testSecret[17:], "h:1", ""), "secret"},
		{"secret empty", good(testID, "", "h:1", ""), "secret"},
		{"secret with hash", good(testID, testSecret[:10]+"#"+testSecret[11:], "h:1", ""), "address"},
		{"no port", good(testID, testSecret, "director", ""), "address"},
		{"empty port", good(testID, testSecret, "director:", ""), "address"},
		{"port 0", good(testID, testSecret, "director:0", ""), "address"},
		{"port 65536", good(testID, testSecret, "director:65536", ""), "address"},
		{"port sign", good(testID, testSecret, "director:+80", ""), "address"},
		{"port name", good(testID, testSecret, "director:https", ""), "address"},
		{"empty host", good(testID, testSecret, ":9443", ""), "address"},
		{"ipv6 unbracketed", good(testID, testSecret, "2001:db8::1:9443", ""), "address"},
		{"ipv6 with zone", good(testID, testSecret, "[fe80::1%eth0]:9443", ""), "address"},
		{"name in brackets", good(testID, testSecret, "[director]:9443", ""), "address"},
		{"ipv4 in brackets", good(testID, testSecret, "[192.0.2.1]:9443", ""), "address"},
		{"underscore", good(testID, testSecret, "dir_ector:9443", ""), "address"},
		{"label hyphen", good(testID, testSecret, "-director:9443", ""), "address"},
		{"empty label", good(testID, testSecret, "a..b:9443", ""), "address"},
		{"numeric last label", good(testID, testSecret, "10.0.0:9443", ""), "address"},
		{"bad ipv4", good(testID, testSecret, "300.1.2.3:9443", ""), "address"},
		{"second at", good(testID, testSecret, "x@h:1", ""), "address"},
		{"empty pin", good(testID, testSecret, "h:1", "") + "#", "pin"},
		{"pin other hash", good(testID, testSecret, "h:1", "sha1:"+strings.Repeat("a", 40)), "pin"},
		{"pin short", good(testID, testSecret, "h:1", testPin[:len(testPin)-1]), "pin"},
		{"pin long", good(testID, testSecret, "h:1", testPin+"0"), "pin"},
		{"pin upper", good(testID, testSecret, "h:1", strings.ToUpper(testPin[:7])+strings.ToUpper(testPin[7:])), "pin"},
		{"pin upper hex", good(testID, testSecret, "h:1", "sha256:"+strings.ToUpper(testPin[7:])), "pin"},
		{"pin not hex", good(testID, testSecret, "h:1", "sha256:"+strings.Repeat("g", 64)), "pin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j, err := ParseJoin(tt.in)
			if err == nil {
				t.Fatalf("ParseJoin accepted %q: %v", tt.in, j)
			}
			if !errors.Is(err, ErrBadJoin) {
				t.Errorf("error %v does not wrap ErrBadJoin", err)
			}
			var je *JoinError
			if !errors.As(err, &je) || je.Part != tt.part {
				t.Errorf("error %v: want a *JoinError about the %s", err, tt.part)
			}
			assertNoSecret(t, err.Error())
		})
	}
}

// assertNoSecret fails when msg holds the test secret or a long piece of
// it (a malformed secret is a piece of the real one).
func assertNoSecret(t *testing.T, msg string) {
	t.Helper()
	for i := 0; i+8 <= len(testSecret); i++ {
		if piece := testSecret[i : i+8]; strings.Contains(strings.ToLower(msg), piece) {
			t.Errorf("message %q holds a piece of the secret (%q)", msg, piece)
			return
		}
	}
}

func TestNewJoinRefused(t *testing.T) {
	tests := []struct {
		name, id, secret, addr, pin, part string
	}{
		{"bad id", "short", testSecret, "h:1", "", "id"},
		{"bad secret", testID, "short", "h:1", "", "secret"},
		{"id and secret swapped", testSecret, testID, "h:1", "", "id"},
		{"bad addr", testID, testSecret, "h", "", "address"},
		{"bad pin", testID, testSecret, "h:1", "sha256:00", "pin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewJoin(tt.id, tt.secret, tt.addr, tt.pin)
			var je *JoinError
			if !errors.As(err, &je) || je.Part != tt.part || !errors.Is(err, ErrBadJoin) {
				t.Fatalf("got %v; want a *JoinError about the %s", err, tt.part)
			}
			assertNoSecret(t, err.Error())
		})
	}
}

func TestSplitToken(t *testing.T) {
	id, secret, err := SplitToken(testID + "." + testSecret)
	if err != nil || id != testID || secret != testSecret {
		t.Fatalf("SplitToken = %q, %q, %v; want %q and the secret", id, secret, err, testID)
	}
	tests := []struct {
		name, tok, part string
	}{
		{"empty", "", "id"},
		{"secret only", testSecret, "id"},
		{"no id", "." + testSecret, "id"},
		{"no secret", testID + ".", "secret"},
		{"short secret", testID + "." + testSecret[2:], "secret"},
		{"bad secret charset", testID + "." + testSecret[:31] + "!", "secret"},
		{"two dots", testID + "." + testSecret[:16] + "." + testSecret[17:], "secret"},
		{"whole join string", "vcj1:" + testID + "." + testSecret + "@h:1", "id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := SplitToken(tt.tok)
			var je *JoinError
			if !errors.As(err, &je) || je.Part != tt.part || !errors.Is(err, ErrBadJoin) {
				t.Fatalf("got %v; want a *JoinError about the %s", err, tt.part)
			}
			if !strings.HasPrefix(err.Error(), "token: ") {
				t.Errorf("error %q: want it to start with \"token: \"", err)
			}
			assertNoSecret(t, err.Error())
		})
	}
}
