package logs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Readable renders one JSON log line (slog's JSON handler, the login
// audit) compactly, as "2026-03-14 09:21:14 INFO login user=alice
// tty=tty1": the time to the second, the level and the message first,
// then every other key=value in the line's order, nested objects as
// group.key=value. It reports false for a line that is not one JSON
// object, which stays as it is.
func Readable(line string) (string, bool) {
	t := strings.TrimSpace(line)
	if len(t) < 2 || t[0] != '{' || t[len(t)-1] != '}' || !json.Valid([]byte(t)) {
		return "", false
	}
	var kvs []kv
	if !object(json.RawMessage(t), "", &kvs) || len(kvs) == 0 {
		return "", false
	}
	var head, rest []string
	var when, level, msg string
	for _, e := range kvs {
		switch {
		case e.key == "time" && when == "":
			if s, ok := str(e.val); ok {
				when = readableTime(s)
				continue
			}
		case e.key == "level" && level == "":
			if s, ok := str(e.val); ok && s != "" {
				level = s
				continue
			}
		case e.key == "msg" && msg == "":
			if s, ok := str(e.val); ok {
				msg = s
				continue
			}
		}
		rest = append(rest, e.key+"="+value(e.val))
	}
	if level != "" {
		// INFO and WARN line up with ERROR and DEBUG
		level = fmt.Sprintf("%-5s", level)
	}
	for _, s := range []string{when, level, msg} {
		if s != "" {
			head = append(head, s)
		}
	}
	return strings.TrimRight(strings.Join(append(head, rest...), " "), " "), true
}

type kv struct {
	key string
	val json.RawMessage
}

// object appends the members of the JSON object raw to kvs in their order,
// flattening nested objects under prefix.
func object(raw json.RawMessage, prefix string, kvs *[]kv) bool {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		k, ok := tok.(string)
		if !ok {
			return false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return false
		}
		k = prefix + k
		if len(v) > 0 && v[0] == '{' {
			n := len(*kvs)
			if !object(v, k+".", kvs) {
				return false
			}
			if len(*kvs) > n {
				continue
			}
			// an empty group still shows
		}
		*kvs = append(*kvs, kv{k, v})
	}
	return true
}

// str is v as a string when it is a JSON string.
func str(v json.RawMessage) (string, bool) {
	if len(v) == 0 || v[0] != '"' {
		return "", false
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", false
	}
	return s, true
}

// value is v as slog's text handler writes it: strings bare unless they
// need quotes, numbers, booleans and null as they are, arrays compact.
func value(v json.RawMessage) string {
	if s, ok := str(v); ok {
		if needsQuote(s) {
			return strconv.Quote(s)
		}
		return s
	}
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		return string(v)
	}
	return b.String()
}

func needsQuote(s string) bool {
	if s == "" {
		return true
	}
	for _, r := range s {
		if unicode.IsSpace(r) || r == '"' || r == '=' || !unicode.IsPrint(r) {
			return true
		}
	}
	return false
}

// readableTime is an RFC 3339 time to the second, in its own zone; any
// other text as it is.
func readableTime(s string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return t.Format("2006-01-02 15:04:05")
}
