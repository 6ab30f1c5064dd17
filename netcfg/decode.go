package netcfg

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/virtcon/virtcon/internal/yamlcheck"
)

// Decode reads exactly one network.yaml document, YAML or JSON (JSON is
// YAML), rejecting unknown fields and values of the wrong type by their
// path (bridges[0].mtu). It checks apiVersion and kind; Validate checks
// the rest. Every error wraps ErrInvalid.
func Decode(data []byte) (*Config, error) {
	doc, err := yamlcheck.Document(data, "file")
	if errors.Is(err, yamlcheck.ErrMoreDocuments) {
		return nil, fmt.Errorf("%w: %v; a host has one network configuration", ErrInvalid, err)
	} else if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	var errs []*FieldError
	for _, p := range yamlcheck.Check(doc, reflect.TypeFor[Config]()) {
		errs = append(errs, fieldErr(p.Field, p.Value, p.Msg))
	}
	if len(errs) > 0 {
		return nil, invalid(errs)
	}
	var cfg Config
	if err := doc.Decode(&cfg); err != nil {
		// yamlcheck catches the type errors first; this is a backstop.
		return nil, fmt.Errorf("%w: %s", ErrInvalid, yamlcheck.Message(err))
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
