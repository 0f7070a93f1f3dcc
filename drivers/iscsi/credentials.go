// CHAP credentials: loaded from secret files and checked for what a node record can carry.

package iscsi

import (
	"errors"
	"fmt"
	"strings"

	"github.com/volumed/volumed/internal/secret"
)

// credentials are a login's auth settings as node record values.
type credentials struct {
	method                                     string // "None" or "CHAP"
	username, password, usernameIn, passwordIn string
}

func (cr credentials) values() map[string]string {
	return map[string]string{
		keyAuthMethod: cr.method,
		keyUsername:   cr.username,
		keyPassword:   cr.password,
		keyUsernameIn: cr.usernameIn,
		keyPasswordIn: cr.passwordIn,
	}
}

// secrets lists what must be redacted from errors of this login.
func (cr credentials) secrets() []string { return []string{cr.password, cr.passwordIn} }

// loadCredentials reads the CHAP secrets and checks everything open-iscsi
// would silently mangle or refuse.
func loadCredentials(ch *CHAP) (credentials, error) {
	if ch == nil {
		return credentials{method: "None"}, nil
	}
	cr := credentials{method: "CHAP", username: ch.Username, usernameIn: ch.MutualUsername}
	if err := checkValue("chap username", ch.Username); err != nil {
		return credentials{}, err
	}
	if ch.PasswordFile == "" {
		return credentials{}, errors.New("chap passwordFile is empty")
	}
	pw, err := readPassword("chap passwordFile", ch.PasswordFile)
	if err != nil {
		return credentials{}, err
	}
	cr.password = pw
	if (ch.MutualUsername == "") != (ch.MutualPasswordFile == "") {
		return credentials{}, errors.New("mutual chap needs both mutualUsername and mutualPasswordFile")
	}
	if ch.MutualUsername != "" {
		if err := checkValue("chap mutualUsername", ch.MutualUsername); err != nil {
			return credentials{}, err
		}
		in, err := readPassword("chap mutualPasswordFile", ch.MutualPasswordFile)
		if err != nil {
			return credentials{}, err
		}
		// RFC 3720 8.2.1: a secret must not authenticate both directions;
		// iscsid refuses the login ("Local password same as remote").
		if in == pw {
			return credentials{}, fmt.Errorf("chap mutualPasswordFile %s holds the same secret as passwordFile %s; mutual CHAP needs two different secrets", ch.MutualPasswordFile, ch.PasswordFile)
		}
		cr.passwordIn = in
	}
	return cr, nil
}

func readPassword(field, path string) (string, error) {
	v, err := secret.Read(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	if err := checkValue(field+" "+path+": the secret", v.Reveal()); err != nil {
		return "", err
	}
	return v.Reveal(), nil
}

// checkValue refuses what open-iscsi's "name = value" records cannot carry
// intact: it trims surrounding white space, ends values at a newline and
// cuts them at 255 bytes. Messages never include the value.
func checkValue(what, v string) error {
	switch {
	case v == "":
		return fmt.Errorf("%s is empty", what)
	case len(v) > maxValue:
		return fmt.Errorf("%s is longer than %d bytes", what, maxValue)
	case strings.TrimSpace(v) != v:
		return fmt.Errorf("%s starts or ends with white space, which open-iscsi drops", what)
	case v == emptyValue:
		return fmt.Errorf("%s is %q, which iscsiadm prints for an unset value", what, emptyValue)
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%s contains a control character", what)
		}
	}
	return nil
}
