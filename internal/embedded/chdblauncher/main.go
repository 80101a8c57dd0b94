//go:build cgo

// Command chdblauncher runs clickhouse-local from libchdb.so as a TCP server.
//
// It is built and started by package embedded; it is not meant to be run by
// hand. Usage:
//
//	chdblauncher /path/to/libchdb.so [clickhouse-local arguments...]
//
// The library is loaded with dlopen at run time, so this program builds
// without it. chdb_query_cmdline receives the arguments after the library
// path, prefixed with the program name "clickhouse". The query passed by
// package embedded never returns, so the process serves TCP until it is
// killed. If chdb_query_cmdline does return, the launcher prints the error it
// reports and exits with status 1.
package main

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

typedef void *(*query_cmdline_fn)(int, char **);
typedef const char *(*result_error_fn)(void *);

static void *open_lib(const char *path) {
	return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

static const char *last_error(void) {
	const char *e = dlerror();
	return e ? e : "unknown dlopen error";
}

static void *call_query_cmdline(void *fn, int argc, char **argv) {
	return ((query_cmdline_fn)fn)(argc, argv);
}

static const char *call_result_error(void *fn, void *res) {
	return ((result_error_fn)fn)(res);
}
*/
import "C"

import (
	"fmt"
	"os"
	"unsafe"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) < 1 {
		fmt.Fprintln(os.Stderr, "usage: chdblauncher LIBCHDB [clickhouse-local args...]")
		return 2
	}
	cpath := C.CString(args[0])
	defer C.free(unsafe.Pointer(cpath))
	lib := C.open_lib(cpath)
	if lib == nil {
		fmt.Fprintf(os.Stderr, "chdblauncher: dlopen %s: %s\n", args[0], C.GoString(C.last_error()))
		return 1
	}
	fn := lookup(lib, "chdb_query_cmdline")
	if fn == nil {
		fmt.Fprintf(os.Stderr, "chdblauncher: dlsym chdb_query_cmdline: %s\n", C.GoString(C.last_error()))
		return 1
	}

	argv := append([]string{"clickhouse"}, args[1:]...)
	cargv := C.malloc(C.size_t(len(argv)+1) * C.size_t(unsafe.Sizeof(uintptr(0))))
	ptrs := unsafe.Slice((**C.char)(cargv), len(argv)+1)
	for i, a := range argv {
		ptrs[i] = C.CString(a)
	}
	ptrs[len(argv)] = nil

	res := C.call_query_cmdline(fn, C.int(len(argv)), (**C.char)(cargv))
	msg := "query returned"
	if errFn := lookup(lib, "chdb_result_error"); errFn != nil && res != nil {
		if e := C.call_result_error(errFn, res); e != nil {
			msg = C.GoString(e)
		}
	}
	fmt.Fprintf(os.Stderr, "chdblauncher: clickhouse-local stopped: %s\n", msg)
	return 1
}

func lookup(lib unsafe.Pointer, name string) unsafe.Pointer {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	return C.dlsym(lib, cname)
}
