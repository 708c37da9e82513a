//go:build !unix

package main

// lockDataDir does not lock on systems without flock(2): two `up`
// processes on one --data folder are not detected there.
func lockDataDir(string) (func(), error) { return func() {}, nil }
