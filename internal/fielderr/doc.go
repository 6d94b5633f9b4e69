// Package fielderr gives configuration errors that name the Config
// fields they are about, so that a library's errors speak of its own
// settings and a program renders them in its own words: cmd/pcapsync
// shows each field as the flag that sets it.
//
// A field is named in a format string as {pkg.Path}: the name of the
// package whose Config holds it, and the field's path from that Config
// (agent.SnapLen, store.Retain.MaxAge, serve.Tap.QueueSize). Error
// shows it as its path (SnapLen); Render shows it as a program's name
// function returns. The keys are written in the format strings, or as
// Key("pkg.Path") literals where a caller chooses the field a part
// names, never built at run time, so that a program's test can list
// every key a library's errors can name by reading the library's
// source.
//
// Errors are immutable and safe for concurrent use.
package fielderr
