package natsembed

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"

	"github.com/nats-io/nats-server/v2/server"
)

// roleAuth authenticates the embedded server's clients and gives each the permissions of
// its role:
//   - the worker: a user and password made at start that never leave the process (the
//     worker's own connection is in process);
//   - an operator: OperatorUser and OperatorPassword;
//   - a producer: User and Password, or Token, or, on a server that requires client
//     certificates, a verified certificate and nothing else.
type roleAuth struct {
	worker, operator, producer login
	token                      string
	certIsProducer             bool // mutual TLS: a verified certificate alone is a producer
}

// workerUser is the worker's user name; its password is made at each start.
const workerUser = "la-worker"

// login is a user name and password; the zero login matches nobody.
type login struct{ user, password string }

func (l login) matches(user, password string) bool {
	if l.user == "" {
		return false
	}
	u := subtle.ConstantTimeCompare([]byte(l.user), []byte(user))
	p := subtle.ConstantTimeCompare([]byte(l.password), []byte(password))
	return u&p == 1
}

// newRoleAuth makes the authenticator for o, with a fresh worker login.
func newRoleAuth(o Options) (*roleAuth, error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("embedded NATS: make the worker's password: %w", err)
	}
	return &roleAuth{
		worker:         login{workerUser, base64.RawURLEncoding.EncodeToString(secret)},
		operator:       login{o.OperatorUser, o.OperatorPassword},
		producer:       login{o.User, o.Password},
		token:          o.Token,
		certIsProducer: o.mutualTLS(),
	}, nil
}

// Check implements server.Authentication.
func (a *roleAuth) Check(c server.ClientAuthentication) bool {
	if c.Kind() != server.CLIENT {
		return false
	}
	role, name, ok := a.roleOf(c)
	if !ok {
		return false
	}
	c.RegisterUser(&server.User{Username: name, Permissions: role.Permissions()})
	return true
}

// roleOf finds who the client is, by what it presented.
func (a *roleAuth) roleOf(c server.ClientAuthentication) (Role, string, bool) {
	o := c.GetOpts()
	switch {
	case a.worker.matches(o.Username, o.Password):
		return RoleWorker, a.worker.user, true
	case a.operator.matches(o.Username, o.Password):
		return RoleOperator, a.operator.user, true
	case a.producer.matches(o.Username, o.Password):
		return RoleProducer, a.producer.user, true
	case a.token != "" && o.Username == "" &&
		subtle.ConstantTimeCompare([]byte(a.token), []byte(o.Token)) == 1:
		return RoleProducer, "producer (token)", true
	case a.certIsProducer && o.Username == "" && o.Password == "" && o.Token == "" && verifiedCert(c):
		return RoleProducer, "producer (certificate)", true
	}
	return "", "", false
}

// verifiedCert reports whether the client connected over TLS with a certificate the
// server verified (the server's TLS settings require and check it).
func verifiedCert(c server.ClientAuthentication) bool {
	st := c.GetTLSConnectionState()
	return st != nil && len(st.VerifiedChains) > 0
}
