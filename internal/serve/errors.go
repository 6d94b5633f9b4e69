package serve

import "errors"

// ErrConfig wraps every error of Config.Validate and the errors of New
// about the files the Config names, an output root that is missing and
// cannot be made or is not writable (store.ErrRootUnusable) included:
// the command line, the configuration or the directory it names is at
// fault, and starting again does not help until someone puts it right.
var ErrConfig = errors.New("bad configuration")
