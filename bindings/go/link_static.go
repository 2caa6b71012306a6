//go:build kcsi_static

package kcsi

// Linked against libkcsi.a, so the binary needs no libkcsi.so.1 at run time. pkg-config
// --static adds the Rust runtime's system libraries (Libs.private: -lpthread -ldl -lm);
// -l:libkcsi.a makes the linker take the archive even though libkcsi.so sits beside it.

// #cgo pkg-config: --static kcsi
// #cgo LDFLAGS: -l:libkcsi.a
import "C"
