package wasm_test

import (
	"context"
	"fmt"
	"time"

	"github.com/graphorin/graphorin-go/pkg/sandbox/wasm"
)

// catModule is a WASI command, assembled by hand, that copies up to 1 KiB
// of stdin to stdout with one fd_read and one fd_write:
//
//	(module
//	  (import "wasi_snapshot_preview1" "fd_read" (func (param i32 i32 i32 i32) (result i32)))
//	  (import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32)))
//	  (memory (export "memory") 1)
//	  (data (i32.const 0) "\40\00\00\00\00\04\00\00") ;; iovec {buf: 64, len: 1024}
//	  (func (export "_start")
//	    (drop (call 0 (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8)))  ;; nread at 8
//	    (i32.store (i32.const 4) (i32.load (i32.const 8)))                        ;; iovec.len = nread
//	    (drop (call 1 (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 12)))))
var catModule = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
	0x01, 0x0c, 0x02, 0x60, 0x04, 0x7f, 0x7f, 0x7f, 0x7f, 0x01, 0x7f, 0x60, 0x00, 0x00,
	0x02, 0x44, 0x02,
	0x16, 'w', 'a', 's', 'i', '_', 's', 'n', 'a', 'p', 's', 'h', 'o', 't', '_', 'p', 'r', 'e', 'v', 'i', 'e', 'w', '1',
	0x07, 'f', 'd', '_', 'r', 'e', 'a', 'd', 0x00, 0x00,
	0x16, 'w', 'a', 's', 'i', '_', 's', 'n', 'a', 'p', 's', 'h', 'o', 't', '_', 'p', 'r', 'e', 'v', 'i', 'e', 'w', '1',
	0x08, 'f', 'd', '_', 'w', 'r', 'i', 't', 'e', 0x00, 0x00,
	0x03, 0x02, 0x01, 0x01,
	0x05, 0x03, 0x01, 0x00, 0x01,
	0x07, 0x13, 0x02, 0x06, '_', 's', 't', 'a', 'r', 't', 0x00, 0x02, 0x06, 'm', 'e', 'm', 'o', 'r', 'y', 0x02, 0x00,
	0x0a, 0x24, 0x01, 0x22, 0x00,
	0x41, 0x00, 0x41, 0x00, 0x41, 0x01, 0x41, 0x08, 0x10, 0x00, 0x1a,
	0x41, 0x04, 0x41, 0x08, 0x28, 0x02, 0x00, 0x36, 0x02, 0x00,
	0x41, 0x01, 0x41, 0x00, 0x41, 0x01, 0x41, 0x0c, 0x10, 0x01, 0x1a,
	0x0b,
	0x0b, 0x0e, 0x01, 0x00, 0x41, 0x00, 0x0b, 0x08, 0x40, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00,
}

func ExampleRuntime_Call() {
	ctx := context.Background()
	rt, err := wasm.NewRuntime(ctx, wasm.Config{MemoryLimitBytes: 16 << 20})
	if err != nil {
		panic(err)
	}
	defer rt.Close(ctx)

	mod, err := rt.Compile(ctx, catModule)
	if err != nil {
		panic(err)
	}
	callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := rt.Call(callCtx, mod, []byte(`{"text":"hello"}`))
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s\n", out)

	_, err = rt.Call(callCtx, mod, []byte(`hello`))
	fmt.Println(wasm.KindOf(err))
	// Output:
	// {"text":"hello"}
	// invalid_output
}

func ExampleRuntime_Compile() {
	ctx := context.Background()
	rt, err := wasm.NewRuntime(ctx, wasm.Config{})
	if err != nil {
		panic(err)
	}
	defer rt.Close(ctx)

	// evilModule imports "env"."evil": only WASI functions may be imported.
	_, err = rt.Compile(ctx, evilModule)
	fmt.Println(wasm.KindOf(err))
	fmt.Println(err)
	// Output:
	// sandbox_violation
	// wasm: sandbox_violation: module 521a54aa5704 imports function "env"."evil"; a tool may import only wasi_snapshot_preview1 functions
}
