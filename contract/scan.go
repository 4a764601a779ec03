package contract

import (
	"errors"
	"fmt"
	"strconv"
)

// BigNumbersKeyword, set to true at the root of an output schema, lets a
// result hold numbers beyond float64's range (up to MaxNumberLength
// characters and an exponent of ±9999). Without it every number of a
// result must fit a float64: gojsonschema parses each number into an
// exact rational, so 1e999999 costs the worker seconds, and a risk policy
// cannot compare what a float64 cannot hold.
const BigNumbersKeyword = "x-airlock-big-numbers"

// MaxNumberLength bounds the characters of one number of a result.
const MaxNumberLength = 100

// maxBigExponent bounds a number's exponent with BigNumbersKeyword.
const maxBigExponent = 9999

// ErrNumber: a number of the result does not fit a float64 (or, with
// BigNumbersKeyword, passes its bounds).
var ErrNumber = errors.New("number out of range")

// shape is what a scan of a JSON document found.
type shape struct {
	values int // every value, containers and scalars, object keys not counted
}

// scan walks a document that json.Valid accepted, counting its values and
// checking each number against the float64 range (or the bounds of
// BigNumbersKeyword when big): no allocation, one pass.
func scan(data []byte, big bool) (shape, error) {
	var sh shape
	for i := 0; i < len(data); {
		switch c := data[i]; {
		case c == '"':
			j := i + 1
			for j < len(data) && data[j] != '"' {
				if data[j] == '\\' {
					j++
				}
				j++
			}
			j++ // the closing quote
			k := j
			for k < len(data) && isSpace(data[k]) {
				k++
			}
			if k >= len(data) || data[k] != ':' {
				sh.values++ // a value, not a key
			}
			i = j
		case c == '{' || c == '[':
			sh.values++
			i++
		case c == 't' || c == 'n':
			sh.values++
			i += 4
		case c == 'f':
			sh.values++
			i += 5
		case c == '-' || (c >= '0' && c <= '9'):
			j := i
			for j < len(data) && isNumberByte(data[j]) {
				j++
			}
			if err := checkNumber(data[i:j], big); err != nil {
				return sh, fmt.Errorf("%w: %s at byte %d %s", ErrNumber, quoteNumber(data[i:j]), i, err.Error())
			}
			sh.values++
			i = j
		default: // whitespace, ',', ':', '}', ']'
			i++
		}
	}
	return sh, nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isNumberByte(c byte) bool {
	return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}

// checkNumber checks one JSON number literal.
func checkNumber(lit []byte, big bool) error {
	if len(lit) > MaxNumberLength {
		return fmt.Errorf("is longer than %d characters", MaxNumberLength)
	}
	if big {
		if e, ok := exponent(lit); !ok || e > maxBigExponent || e < -maxBigExponent {
			return fmt.Errorf("has an exponent beyond ±%d (the bound of %s)", maxBigExponent, BigNumbersKeyword)
		}
		return nil
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil {
		return fmt.Errorf("is beyond float64's range (a schema may accept it with %q: true)", BigNumbersKeyword)
	}
	if f == 0 && nonZeroMantissa(lit) {
		return fmt.Errorf("is too small for a float64 (it would read as 0; a schema may accept it with %q: true)", BigNumbersKeyword)
	}
	return nil
}

// exponent returns the exponent of a number literal, 0 when it has none;
// ok is false when it does not fit an int.
func exponent(lit []byte) (int, bool) {
	for i, c := range lit {
		if c == 'e' || c == 'E' {
			n, err := strconv.Atoi(string(lit[i+1:]))
			return n, err == nil
		}
	}
	return 0, true
}

// nonZeroMantissa reports whether a literal's digits before its exponent
// are not all zeros.
func nonZeroMantissa(lit []byte) bool {
	for _, c := range lit {
		if c == 'e' || c == 'E' {
			return false
		}
		if c >= '1' && c <= '9' {
			return true
		}
	}
	return false
}

// quoteNumber shows a literal in an error, cut to 32 characters.
func quoteNumber(lit []byte) string {
	if len(lit) > 32 {
		return string(lit[:32]) + "…"
	}
	return string(lit)
}
