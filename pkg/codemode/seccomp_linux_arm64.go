package codemode

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_AARCH64
	x32Bit    = 0
)

// archSyscalls are the allowed system calls only arm64 has.
var archSyscalls []uintptr
