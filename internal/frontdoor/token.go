package frontdoor

import (
	"crypto/sha256"
	"crypto/subtle"
	"strings"
)

// TokenEqual compares a token a client sent with the one required, in
// time that depends on neither (both are hashed first).
func TokenEqual(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// BearerToken returns the token of an Authorization header value in the
// Bearer scheme (RFC 6750), the scheme's name in any case (RFC 7235)
// and the token without surrounding white space; ok is false for
// another scheme or no token.
func BearerToken(header string) (token string, ok bool) {
	scheme, rest, found := strings.Cut(strings.TrimLeft(header, " \t"), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.Trim(rest, " \t")
	return token, token != ""
}
