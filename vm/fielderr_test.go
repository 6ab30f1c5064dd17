package vm

import (
	"errors"
	"testing"

	"github.com/virtcon/virtcon/internal/fielderr"
)

// vm's admission and image errors are internal/fielderr's: every one is
// fielderr.ErrInvalid, a VM's is ErrInvalid and not ErrInvalidImage, an
// image's the other way round, and their text is as before.
func TestErrorKinds(t *testing.T) {
	_, manifest := Decode([]byte("apiVersion: virtcon/v1\nkind: VirtualMachine\nmetadata: {name: a}\nspec: {cpus: 0}\nfrob: 1\n"))
	_, empty := Decode(nil)
	image := &ImageError{Errs: []*FieldError{{Field: "url", Value: "ftp://x/y", Msg: "must be an http:// or https:// URL"}}}
	tests := []struct {
		name             string
		err              error
		vm, img, invalid bool
	}{
		{"manifest", manifest, true, false, true},
		{"empty manifest", empty, true, false, true},
		{"image", image, false, true, true},
		{"name", ValidateName("metadata.name", "-"), false, false, true},
	}
	for _, tc := range tests {
		if got := errors.Is(tc.err, ErrInvalid); got != tc.vm {
			t.Errorf("%s: errors.Is(%v, ErrInvalid) = %t; want %t", tc.name, tc.err, got, tc.vm)
		}
		if got := errors.Is(tc.err, ErrInvalidImage); got != tc.img {
			t.Errorf("%s: errors.Is(%v, ErrInvalidImage) = %t; want %t", tc.name, tc.err, got, tc.img)
		}
		if got := errors.Is(tc.err, fielderr.ErrInvalid); got != tc.invalid {
			t.Errorf("%s: errors.Is(%v, fielderr.ErrInvalid) = %t; want %t", tc.name, tc.err, got, tc.invalid)
		}
	}
	var ve *fielderr.ValidationError
	if !errors.As(manifest, &ve) || ve.Kind != ErrInvalid || len(ve.Errs) == 0 {
		t.Errorf("errors.As(%v, *fielderr.ValidationError) = %+v; want the list, of kind ErrInvalid", manifest, ve)
	}
	if !errors.As(image, &ve) || ve.Kind != ErrInvalidImage || len(ve.Errs) != 1 {
		t.Errorf("errors.As(image error, *fielderr.ValidationError) = %+v; want the list, of kind ErrInvalidImage", ve)
	}
	if got, want := image.Error(), `invalid image: url: must be an http:// or https:// URL (got "ftp://x/y")`; got != want {
		t.Errorf("ImageError = %q; want %q", got, want)
	}
	var ie *ImageError
	if errors.As(manifest, &ie) {
		t.Errorf("errors.As(manifest error, *ImageError) = true; want a VM's error told from an image's")
	}
}
