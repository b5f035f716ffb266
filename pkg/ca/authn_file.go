package ca

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// fileTokenAuthn (file mode) accepts bearer tokens listed in a file the
// operator names, one "<token>,<namespace>,<service account>" per line
// ('#' starts a comment). The file is read again when it changes.
type fileTokenAuthn struct {
	path        string
	trustDomain string

	mu      sync.Mutex
	modTime time.Time
	size    int64
	tokens  map[[sha256.Size]byte]Identity
}

var _ Authenticator = (*fileTokenAuthn)(nil)

func newFileTokenAuthn(path, trustDomain string) (*fileTokenAuthn, error) {
	f := &fileTokenAuthn{path: path, trustDomain: trustDomain}
	if err := f.reload(); err != nil {
		return nil, err
	}
	return f, nil
}

func (*fileTokenAuthn) Name() string { return "token-file" }

func (f *fileTokenAuthn) Authenticate(ctx context.Context) (Identity, error) {
	token, err := bearerToken(ctx)
	if err != nil {
		return Identity{}, err
	}
	if err := f.reload(); err != nil {
		return Identity{}, err
	}
	h := sha256.Sum256([]byte(token))
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, id := range f.tokens {
		if subtle.ConstantTimeCompare(k[:], h[:]) == 1 {
			return id, nil
		}
	}
	return Identity{}, errors.New("token is not in the token file")
}

// reload reads the file again if its size or modification time changed.
// On a bad file the previous tokens stay in force.
func (f *fileTokenAuthn) reload() error {
	st, err := os.Stat(f.path)
	if err != nil {
		return fmt.Errorf("token file: %w", err)
	}
	f.mu.Lock()
	same := f.tokens != nil && st.ModTime().Equal(f.modTime) && st.Size() == f.size
	f.mu.Unlock()
	if same {
		return nil
	}
	data, err := os.ReadFile(f.path)
	if err != nil {
		return fmt.Errorf("token file: %w", err)
	}
	tokens, err := parseTokenFile(data, f.trustDomain)
	if err != nil {
		return fmt.Errorf("token file %s: %w", f.path, err)
	}
	f.mu.Lock()
	f.tokens, f.modTime, f.size = tokens, st.ModTime(), st.Size()
	f.mu.Unlock()
	return nil
}

func parseTokenFile(data []byte, trustDomain string) (map[[sha256.Size]byte]Identity, error) {
	out := map[[sha256.Size]byte]Identity{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Split(line, ",")
		if len(fields) != 3 {
			return nil, fmt.Errorf("line %d: want token,namespace,serviceaccount", n)
		}
		token, ns, sa := strings.TrimSpace(fields[0]), strings.TrimSpace(fields[1]), strings.TrimSpace(fields[2])
		if token == "" || ns == "" || sa == "" {
			return nil, fmt.Errorf("line %d: empty field", n)
		}
		out[sha256.Sum256([]byte(token))] = Identity{TrustDomain: trustDomain, Namespace: ns, ServiceAccount: sa}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
