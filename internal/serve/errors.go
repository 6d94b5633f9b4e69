package serve

import "errors"

// ErrConfig wraps every error of Config.Validate and the errors of New
// about the files the Config names: the command line or configuration
// is at fault, not the machine.
var ErrConfig = errors.New("bad configuration")
