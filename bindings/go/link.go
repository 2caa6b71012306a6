//go:build !kcsi_static

package kcsi

// Linked against the shared libkcsi.so.1 found through kcsi.pc: set PKG_CONFIG_PATH to the
// install prefix's lib/pkgconfig. No rpath is recorded (the loader finds the library through
// its normal search path or LD_LIBRARY_PATH), so binaries keep working when moved.

// #cgo pkg-config: kcsi
import "C"
