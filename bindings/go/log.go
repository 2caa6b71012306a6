package kcsi

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
)

// LogLevel is a kcsi log level, 0 (error) to 4 (trace).
type LogLevel int32

const (
	LogError LogLevel = 0
	LogWarn  LogLevel = 1
	LogInfo  LogLevel = 2
	LogDebug LogLevel = 3
	LogTrace LogLevel = 4
)

// LogFunc receives one kcsi log record. It runs on kcsi's threads, possibly concurrently, so
// it must be safe for concurrent use; it must not call back into kcsi.
type LogFunc func(level LogLevel, target, message string)

var logFunc atomic.Pointer[LogFunc]

// SetLogFunc routes kcsi's log records up to maxLevel to fn, or back to stderr when fn is
// nil. The setting is process-wide, like kcsi's logger.
func SetLogFunc(fn LogFunc, maxLevel LogLevel) error {
	const op = "SetLogFunc"
	enable := C.int(0)
	old := logFunc.Load()
	if fn != nil {
		// Stored first: records may arrive as soon as the callback is installed.
		logFunc.Store(&fn)
		enable = 1
	}
	var e C.gk_err
	if err := check(op, C.gk_set_log_callback(enable, C.int32_t(maxLevel), &e), &e); err != nil {
		logFunc.Store(old)
		return err
	}
	if fn == nil {
		logFunc.Store(nil)
	}
	return nil
}

// SlogFunc returns a LogFunc that writes to l, mapping kcsi levels to slog levels (trace
// becomes slog.LevelDebug-4).
func SlogFunc(l *slog.Logger) LogFunc {
	return func(level LogLevel, target, message string) {
		lv := slog.LevelDebug - 4
		switch level {
		case LogError:
			lv = slog.LevelError
		case LogWarn:
			lv = slog.LevelWarn
		case LogInfo:
			lv = slog.LevelInfo
		case LogDebug:
			lv = slog.LevelDebug
		}
		l.Log(context.Background(), lv, message, "target", target)
	}
}

//export gkLog
func gkLog(level C.int32_t, target, message *C.char) {
	fn := logFunc.Load()
	if fn == nil {
		return
	}
	defer func() {
		// A panic must not unwind into kcsi's Rust frames: that would abort the process.
		if r := recover(); r != nil {
			fmt.Fprintf(os.Stderr, "kcsi: log function panicked: %v\n", r)
		}
	}()
	(*fn)(LogLevel(level), C.GoString(target), C.GoString(message))
}
