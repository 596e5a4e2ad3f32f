package config

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// redacted stands in for a secret in text mccr prints.
const redacted = "REDACTED"

var (
	// userinfo in any URL: scheme://user:password@ or scheme://token@,
	// also without the scheme ("://user:password@", which no URL parser
	// takes, and whose error quotes it). Up to the last '@' of the
	// authority, as Go's URL parser splits it: a password may hold '@',
	// and "'" too (a URL quoted in '…' is still cut at its host).
	urlUserinfo = regexp.MustCompile(`(?i)((?:\b[a-z][a-z0-9+.\-]*)?://)[^/?#\s"<>]+@`)
	// Authorization header values: "Bearer abc", "Basic abc".
	authScheme = regexp.MustCompile(`(?i)\b(bearer|basic)(\s+)[A-Za-z0-9\-._~+/=]+`)
	// The key of a key: value or key=value pair whose value is a
	// credential ("bearerToken": "…", X-Auth-Token: …, api_key=…), up to
	// its value, which redactPairs reads.
	secretKey = regexp.MustCompile(`(?i)\b(?:token|password|passwd|secret|client-key-data|client-certificate-data|access_token|id-token|refresh-token|bearer[_-]?token|auth[_-]?token|api[_-]?key|client[_-]?secret|private[_-]?key)\\*["']?\s*[:=]\s*`)
	// A long opaque word after the name of a credential, as servers and
	// proxies echo them: "invalid token 7Hq2vX9kLm…". A short word ("token
	// expired") is prose; so is what follows "secret", most often a
	// Secret's name.
	secretWord = regexp.MustCompile(`(?i)\b((?:token|password|credential|api key)s?)(\s+["']?)[A-Za-z0-9\-._~+/=]{16,}`)
	// PEM private keys.
	pemKey = regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$)`)
)

// Redact returns s with the secrets mccr knows the shape of replaced by
// "REDACTED": the userinfo of URLs (https://admin:secret@host), bearer and
// basic credentials, token=… and password: … pairs, and PEM private keys.
// Everything mccr prints about a cluster or a kubeconfig — errors, status,
// events, log lines — goes through it; so should a caller's own messages
// that quote a host or an error from a client.
func Redact(s string) string {
	if s == "" {
		return s
	}
	s = urlUserinfo.ReplaceAllString(s, "${1}"+redacted+"@")
	s = authScheme.ReplaceAllString(s, "${1}${2}"+redacted)
	s = redactPairs(s)
	s = secretWord.ReplaceAllString(s, "${1}${2}"+redacted)
	s = pemKey.ReplaceAllString(s, "[PRIVATE KEY "+redacted+"]")
	return s
}

// redactPairs replaces the value of each pair secretKey finds. A quoted
// value is replaced whole, spaces and escaped quotes and all, up to its
// closing quote: a quote escaped as many times as the opening one ("…" in
// JSON or YAML, \"…\" in a JSON document quoted again by %q, and so on
// down), or the end of s. An unquoted one ends at a space or a delimiter.
func redactPairs(s string) string {
	var b strings.Builder
	last := 0
	for last < len(s) {
		loc := secretKey.FindStringIndex(s[last:])
		if loc == nil {
			break
		}
		from := last + loc[1]
		to, quote, closed := pairValue(s, from)
		b.WriteString(s[last:from])
		if to > from {
			b.WriteString(quote + redacted)
			if closed {
				b.WriteString(quote)
			}
		}
		last = to
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// pairValue reads the value that starts at s[i]: it returns where it
// ends, its opening quote with the backslashes that escape it ("" when
// unquoted), and whether a matching closing quote ends it.
func pairValue(s string, i int) (end int, quote string, closed bool) {
	j := i
	for j < len(s) && s[j] == '\\' {
		j++
	}
	if j < len(s) && (s[j] == '"' || s[j] == '\'') {
		escapes, q := j-i, s[j]
		for p := j + 1; p < len(s); p++ {
			if s[p] != q {
				continue
			}
			if q == '\'' && escapes == 0 && p+1 < len(s) && s[p+1] == '\'' {
				p++ // YAML's '' in a single-quoted value
				continue
			}
			r := p
			for r > j+1 && s[r-1] == '\\' {
				r--
			}
			// The quote closes the value when its backslashes are those
			// of the opening quote, after any number of escaped
			// backslashes at the value's own depth (each doubled as often).
			if k := p - r; k%(2*(escapes+1)) == escapes {
				return p + 1, s[i : j+1], true
			}
		}
		return len(s), s[i : j+1], false
	}
	// Unquoted: up to a space, a delimiter, or an escaped quote (the end of
	// a quoted text the pair stands in).
	for j = i; j < len(s); j++ {
		if strings.IndexByte(" \t\n\f\r\"',;&}]", s[j]) >= 0 {
			break
		}
		if s[j] == '\\' && j+1 < len(s) && (s[j+1] == '"' || s[j+1] == '\'') {
			break
		}
	}
	return j, "", false
}

// RedactURL returns a server address fit for printing: userinfo replaced
// (https://REDACTED@host), query values replaced, the rest as given. It
// accepts what rest.Config.Host accepts, a URL or a bare host:port.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Opaque != "" || (u.Scheme == "" && u.Host == "") {
		// Not a URL (a bare "user:pw@host:port", a "://user:pw@host"
		// without a scheme, a password holding a "/"): drop anything
		// between the scheme, if any, and the last "@", then apply the
		// general rules.
		prefix, rest := "", s
		if i := strings.Index(s, "://"); i >= 0 {
			prefix, rest = s[:i+3], s[i+3:]
		}
		if i := strings.LastIndex(rest, "@"); i >= 0 {
			rest = redacted + rest[i:]
		}
		return Redact(prefix + rest)
	}
	if u.User != nil {
		u.User = url.User(redacted)
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			q[k] = []string{redacted}
		}
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// RedactError returns err with Redact applied to its message. errors.Is
// and errors.As still see what err wraps. A nil error stays nil, and an
// error with nothing to redact is returned as it is.
func RedactError(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if clean := Redact(msg); clean != msg {
		return &redactedError{msg: clean, err: err}
	}
	return err
}

// MaxErrorMessage is how much of an error's message RedactErrorFor keeps:
// an API server's answer may be megabytes, and the message is kept in
// Status, shown on pages and logged.
const MaxErrorMessage = 4096

// Shortest credentials RedactErrorWith looks for by value: shorter ones
// would match ordinary words. An exec plugin's environment holds settings
// as well as secrets ("eu-west-1"), so only long values count.
const (
	minEchoedSecret  = 4
	minEchoedSetting = 16
)

// RedactErrorFor is RedactErrorWith for an error about a cluster reached
// with cfg, given cfg's own credentials: its bearer token, password, client
// key, and its exec plugin's environment values of 16 bytes or more.
func RedactErrorFor(err error, cfg *rest.Config) error {
	return RedactErrorWith(err, Credentials(cfg)...)
}

// Credentials returns the credentials cfg holds, for RedactErrorWith.
func Credentials(cfg *rest.Config) []string {
	if cfg == nil {
		return nil
	}
	out := []string{cfg.BearerToken, cfg.Password, string(cfg.KeyData)}
	if cfg.ExecProvider != nil {
		for _, e := range cfg.ExecProvider.Env {
			if len(e.Value) >= minEchoedSetting {
				out = append(out, e.Value)
			}
		}
	}
	return out
}

// RedactErrorWith returns err fit to keep and print as a cluster's error:
// every one of credentials (4 bytes or more) is replaced wherever it
// appears, since an API server or a proxy may echo the credential a
// request carried in any shape; then the secrets of the shapes Redact
// knows; and the message is cut at MaxErrorMessage. The error it returns
// holds the new message alone: errors.Is sees what err wraps, and
// errors.As finds an API server's status (apierrors.APIStatus,
// *apierrors.StatusError) with the new message in place of its own and no
// causes; nothing else of err can be reached through it. Applied again to
// its own result, it changes nothing.
func RedactErrorWith(err error, credentials ...string) error {
	if err == nil {
		return nil
	}
	// Its own result (a generation's error, kept again by the cluster's
	// record) needs the work again only for a credential it may hold.
	if done, ok := err.(*clusterError); ok && !slices.ContainsFunc(credentials, func(v string) bool { //nolint:errorlint // its own result, not one it wraps
		return len(v) >= minEchoedSecret && strings.Contains(done.msg, v)
	}) {
		return err
	}
	msg := err.Error()
	// Only what is kept needs the work: a few times what is kept, so
	// that a credential across the cut is replaced whole.
	clean := cutMessage(msg, 4*MaxErrorMessage, false)
	credentials = slices.Clone(credentials)
	slices.SortFunc(credentials, func(a, b string) int { return len(b) - len(a) }) // the longest first
	for _, v := range credentials {
		if len(v) >= minEchoedSecret {
			clean = strings.ReplaceAll(clean, v, redacted)
		}
	}
	clean = Redact(clean)
	// A message cut before is not cut again for its note.
	if len(clean) > MaxErrorMessage+cutNoteRoom {
		clean = cutMessage(clean, MaxErrorMessage, true)
		clean += fmt.Sprintf(" (%d bytes more)", len(msg)-len(clean)+len("…"))
	}
	return &clusterError{msg: clean, err: err}
}

// QuoteAddress renders a server or proxy address read from a file or an
// object for a message: its credentials redacted (RedactURL), quoted,
// since the input may hold any bytes, and cut to its first 256 bytes
// (marked with "…"), since it may hold a megabyte of them.
func QuoteAddress(s string) string {
	s = RedactURL(s)
	if len(s) <= maxQuotedRef {
		return strconv.Quote(s)
	}
	return strconv.Quote(cutMessage(s, maxQuotedRef, false)) + "…"
}

// cutNoteRoom is what the note of a cut message may add to it.
const cutNoteRoom = 64

// cutMessage cuts s to at most n bytes on a character's start, marked "…"
// when mark is set.
func cutMessage(s string, n int, mark bool) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	if mark {
		return s[:n] + "…"
	}
	return s[:n]
}

// clusterError is RedactErrorWith's error.
type clusterError struct {
	msg string
	err error
}

func (e *clusterError) Error() string { return e.msg }

// Is sees what the original error wraps (ErrSetupFailed, a context's
// cancellation, …).
func (e *clusterError) Is(target error) bool { return errors.Is(e.err, target) }

// As finds an API server's status, its message the redacted one.
func (e *clusterError) As(target any) bool {
	var status apierrors.APIStatus
	if !errors.As(e.err, &status) {
		return false
	}
	st := status.Status()
	st.Message = e.msg
	if st.Details != nil {
		d := *st.Details
		d.Causes = nil
		st.Details = &d
	}
	se := &apierrors.StatusError{ErrStatus: st}
	switch t := target.(type) {
	case *apierrors.APIStatus:
		*t = se
	case **apierrors.StatusError:
		*t = se
	default:
		return false
	}
	return true
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// withheld replaces an error message that would have disclosed a secret.
const withheld = "details withheld: the message quoted the input"

// decodeQuoted matches what the YAML decoder's message quotes of its input
// beyond a character or two: "unknown anchor 's3cr3t' referenced" for a
// token written "*s3cr3t", "cannot decode !!binary `s3cr3t`". (Names in
// double quotes, as clientcmd's own messages quote them, stay.)
var decodeQuoted = regexp.MustCompile("'[^']{3,}'|`[^`]{3,}`")

// decodeMessage returns the message of a decoding error without the parts
// that may quote the kubeconfig. Decoders echo input they choke on, and
// clientcmd's conversion prints a whole list (users and their credentials
// included) when a name appears twice in it; in a kubeconfig, input may be a
// credential. So lists are cut, quoted input is elided, and a message that
// still holds a word of the input (with YAML's quotes and indicators
// trimmed) is withheld.
func decodeMessage(err error, data []byte) string {
	return DecodeErrorMessage(err, data)
}

// DecodeErrorMessage returns the message of an error from decoding data
// (YAML or JSON that may hold credentials) without the parts that may quote
// data: lists it prints are cut, quoted input is elided, and a message that
// still holds a word of data is withheld. Use it for any file or object
// whose parse error is reported.
func DecodeErrorMessage(err error, data []byte) string {
	msg := err.Error()
	for _, dump := range []string{": [", ": {", ": map[", ": &"} {
		if i := strings.Index(msg, dump); i >= 0 {
			msg = msg[:i]
		}
	}
	msg = decodeQuoted.ReplaceAllStringFunc(msg, func(q string) string { return q[:1] + "…" + q[len(q)-1:] })
	for f := range bytes.FieldsSeq(data) {
		f = bytes.Trim(f, "\"',:{}[]*&!|>%@`")
		if len(f) >= 12 && strings.Contains(msg, string(f)) {
			return withheld
		}
	}
	return Redact(msg)
}

// WithoutSecrets returns err's message, redacted and cut at
// MaxErrorMessage, unless it contains one of user's credentials, or those
// in cluster's server and proxy addresses: then a note that it was
// withheld. Messages about a parsed kubeconfig (a file's, a Secret's)
// legitimately name files and entries, so only the credentials themselves
// are looked for.
func WithoutSecrets(err error, cluster *clientcmdapi.Cluster, user *clientcmdapi.AuthInfo) string {
	msg := err.Error()
	if QuotesCredential(msg, user) || QuotesURLCredential(msg, cluster.Server, cluster.ProxyURL) {
		return withheld
	}
	// clientcmd quotes what it refuses whole (a proxy-url of a megabyte).
	return cutMessage(Redact(msg), MaxErrorMessage, true)
}

// QuotesURLCredential reports whether msg contains the userinfo of one of
// urls ("user:password" in "https://user:password@host") or its password,
// as RedactURL finds them: what lies between the scheme, if any, and the
// last "@". The addresses need not parse: it is the message about one that
// does not parse that quotes it whole. Credentials shorter than four
// characters are not looked for.
func QuotesURLCredential(msg string, urls ...string) bool {
	for _, u := range urls {
		if i := strings.Index(u, "://"); i >= 0 {
			u = u[i+3:]
		}
		i := strings.LastIndex(u, "@")
		if i < 0 {
			continue
		}
		userinfo := u[:i]
		_, password, _ := strings.Cut(userinfo, ":")
		for _, s := range []string{userinfo, password} {
			if len(s) >= 4 && strings.Contains(msg, s) {
				return true
			}
		}
	}
	return false
}

// QuotesCredential reports whether msg contains one of user's credentials:
// its token, password, client key or certificate data, an auth-provider
// setting or an exec plugin's environment value (those shorter than four
// characters are not looked for). Messages about a kubeconfig that name
// its files and entries are fine to print; such a message is not, even
// after Redact, since a credential need not have a shape Redact knows.
// A nil user quotes nothing.
func QuotesCredential(msg string, user *clientcmdapi.AuthInfo) bool {
	if user == nil {
		return false
	}
	secrets := []string{user.Token, user.Password, string(user.ClientKeyData), string(user.ClientCertificateData)}
	if user.AuthProvider != nil {
		for _, v := range user.AuthProvider.Config {
			secrets = append(secrets, v)
		}
	}
	if user.Exec != nil {
		for _, e := range user.Exec.Env {
			secrets = append(secrets, e.Value)
		}
	}
	for _, s := range secrets {
		if len(s) >= 4 && strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
