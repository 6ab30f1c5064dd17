package netcfg

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"github.com/virtcon/virtcon/internal/yamlcheck"
	"go.yaml.in/yaml/v3"
)

// Decode reads exactly one network.yaml document, YAML or JSON (JSON is
// YAML), rejecting unknown fields and values of the wrong type by their
// path (bridges[0].mtu). It checks apiVersion and kind; Validate checks
// the rest. Every error wraps ErrInvalid.
func Decode(data []byte) (*Config, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("%w: empty file", ErrInvalid)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: empty file (only comments)", ErrInvalid)
	} else if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, yamlMsg(err))
	}
	// A trailing "---" opens an empty document: harmless, and common.
	for {
		var extra yaml.Node
		err := dec.Decode(&extra)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil || !yamlcheck.IsNull(&extra) {
			return nil, fmt.Errorf("%w: more than one document; a host has one network configuration", ErrInvalid)
		}
	}
	var errs []*FieldError
	for _, p := range yamlcheck.Check(&doc, reflect.TypeFor[Config]()) {
		errs = append(errs, fieldErr(p.Field, p.Value, p.Msg))
	}
	if len(errs) > 0 {
		return nil, invalid(errs)
	}
	var cfg Config
	if err := doc.Decode(&cfg); err != nil {
		// yamlcheck catches the type errors first; this is a backstop.
		return nil, fmt.Errorf("%w: %s", ErrInvalid, yamlMsg(err))
	}
	if cfg.APIVersion != APIVersion {
		errs = append(errs, fieldErr("apiVersion", cfg.APIVersion, "want "+APIVersion))
	}
	if cfg.Kind != Kind {
		errs = append(errs, fieldErr("kind", cfg.Kind, "want "+Kind))
	}
	if len(errs) > 0 {
		return nil, invalid(errs)
	}
	return &cfg, nil
}

func yamlMsg(err error) string {
	return strings.TrimPrefix(err.Error(), "yaml: ")
}
