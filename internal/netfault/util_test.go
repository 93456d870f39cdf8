package netfault_test

import (
	"errors"
	"strconv"
)

func errorsAs(err error, target any) bool { return errors.As(err, target) }

func itoa(n int) string { return strconv.Itoa(n) }
