package certs

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

var localNames = SelfSignedOptions{
	DNSNames:    []string{"localhost"},
	IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
}

func withDir(opts SelfSignedOptions, dir string) SelfSignedOptions {
	opts.Dir = dir
	return opts
}

func parseCertFile(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("%s holds no PEM certificate", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSelfSignedWritesAServableBundle(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	b, err := SelfSigned(withDir(localNames, dir))
	if err != nil {
		t.Fatal(err)
	}
	if b.Reused {
		t.Error("Reused = true for an empty directory")
	}

	perms := map[string]os.FileMode{
		dir:        0o700 | os.ModeDir,
		b.KeyFile:  0o600,
		b.CertFile: 0o644,
		b.CAFile:   0o644,
	}
	for path, want := range perms {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s mode = %v, want %v", path, fi.Mode(), want)
		}
	}
	for want, got := range map[string]string{
		filepath.Join(dir, "ca.crt"):  b.CAFile,
		filepath.Join(dir, "tls.crt"): b.CertFile,
		filepath.Join(dir, "tls.key"): b.KeyFile,
	} {
		if got != want {
			t.Errorf("bundle path = %s, want %s", got, want)
		}
	}

	ca := parseCertFile(t, b.CAFile)
	if !ca.IsCA || !ca.BasicConstraintsValid || ca.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("CA: IsCA=%v BasicConstraintsValid=%v KeyUsage=%v, want a CA that signs certificates", ca.IsCA, ca.BasicConstraintsValid, ca.KeyUsage)
	}
	if !ca.MaxPathLenZero {
		t.Error("CA may sign intermediates; it should only sign leaves")
	}
	if d := ca.NotAfter.Sub(ca.NotBefore); d < defaultCAValidity || d > defaultCAValidity+2*time.Hour {
		t.Errorf("CA lifetime = %v, want about %v", d, defaultCAValidity)
	}
	if !bytes.Equal(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}), b.CAPEM) {
		t.Error("CAPEM is not the content of ca.crt")
	}

	leaf := parseCertFile(t, b.CertFile)
	if leaf.IsCA {
		t.Error("the serving certificate is a CA")
	}
	if !slices.Equal(leaf.DNSNames, []string{"localhost"}) {
		t.Errorf("DNS SANs = %v, want [localhost]", leaf.DNSNames)
	}
	if len(leaf.IPAddresses) != 2 || !leaf.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")) || !leaf.IPAddresses[1].Equal(net.IPv6loopback) {
		t.Errorf("IP SANs = %v, want [127.0.0.1 ::1]", leaf.IPAddresses)
	}
	if !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) {
		t.Errorf("ExtKeyUsage = %v, want [ServerAuth]", leaf.ExtKeyUsage)
	}
	if leaf.KeyUsage != x509.KeyUsageDigitalSignature {
		t.Errorf("KeyUsage = %v, want DigitalSignature", leaf.KeyUsage)
	}
	if d := leaf.NotAfter.Sub(leaf.NotBefore); d < defaultServingValidity || d > defaultServingValidity+2*time.Hour {
		t.Errorf("serving lifetime = %v, want about %v", d, defaultServingValidity)
	}
	if leaf.NotBefore.After(time.Now().Add(-time.Minute)) {
		t.Errorf("NotBefore = %v; it should be backdated for clock skew", leaf.NotBefore)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(b.CAPEM)
	for _, name := range []string{"localhost", "127.0.0.1", "::1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
			t.Errorf("verify the serving certificate for %s: %v", name, err)
		}
	}

	// What SelfSigned writes is what FileSource serves.
	src := NewFileSource(b.CertFile, b.KeyFile, WithLogger(testLogger(t)))
	startSource(t, src)
	cfg, err := ServerTLSConfig(src, "")
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, cfg)
	for _, serverName := range []string{"", "localhost"} {
		if _, err := get(httpsClient(roots, serverName, nil), addr); err != nil {
			t.Errorf("request trusting the self-signed CA (server name %q): %v", serverName, err)
		}
	}

	out := filepath.Join(t.TempDir(), "ca-bundle.pem")
	if err := b.WriteCABundle(out); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, b.CAPEM) {
		t.Error("WriteCABundle wrote something else than the CA certificate")
	}
	if fi, _ := os.Stat(out); fi.Mode().Perm() != 0o644 {
		t.Errorf("CA bundle mode = %v, want 0644", fi.Mode().Perm())
	}
}

func TestSelfSignedReusesAValidBundle(t *testing.T) {
	tests := map[string]struct {
		// change turns the options of the first call into those of the
		// second, or damages the directory in between.
		change func(t *testing.T, opts *SelfSignedOptions, clk *clocktesting.FakePassiveClock)
		reused bool
	}{
		"the same names a moment later keep the bundle": {
			change: func(*testing.T, *SelfSignedOptions, *clocktesting.FakePassiveClock) {},
			reused: true,
		},
		"fewer names than before keep the bundle": {
			change: func(_ *testing.T, o *SelfSignedOptions, _ *clocktesting.FakePassiveClock) {
				o.IPAddresses = o.IPAddresses[:1]
			},
			reused: true,
		},
		"half-way through the serving lifetime the bundle is kept": {
			change: func(_ *testing.T, _ *SelfSignedOptions, clk *clocktesting.FakePassiveClock) {
				clk.SetTime(clk.Now().Add(defaultServingValidity / 2))
			},
			reused: true,
		},
		"an added DNS name makes a new bundle": {
			change: func(_ *testing.T, o *SelfSignedOptions, _ *clocktesting.FakePassiveClock) {
				o.DNSNames = append(slices.Clone(o.DNSNames), "host.docker.internal")
			},
		},
		"an added IP address makes a new bundle": {
			change: func(_ *testing.T, o *SelfSignedOptions, _ *clocktesting.FakePassiveClock) {
				o.IPAddresses = append(slices.Clone(o.IPAddresses), net.ParseIP("172.18.0.1"))
			},
		},
		"less than a third of the serving lifetime left makes a new bundle": {
			change: func(_ *testing.T, _ *SelfSignedOptions, clk *clocktesting.FakePassiveClock) {
				clk.SetTime(clk.Now().Add(defaultServingValidity * 7 / 10))
			},
		},
		"a damaged key file makes a new bundle": {
			change: func(t *testing.T, o *SelfSignedOptions, _ *clocktesting.FakePassiveClock) {
				writeFile(t, filepath.Join(o.Dir, KeyFileName), []byte("garbage"))
			},
		},
		"a missing CA file makes a new bundle": {
			change: func(t *testing.T, o *SelfSignedOptions, _ *clocktesting.FakePassiveClock) {
				if err := os.Remove(filepath.Join(o.Dir, CAFileName)); err != nil {
					t.Fatal(err)
				}
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(time.Now())
			opts := withDir(localNames, t.TempDir())
			opts.Clock = clk
			first, err := SelfSigned(opts)
			if err != nil {
				t.Fatal(err)
			}
			tc.change(t, &opts, clk)
			second, err := SelfSigned(opts)
			if err != nil {
				t.Fatal(err)
			}
			if second.Reused != tc.reused {
				t.Errorf("Reused = %v, want %v", second.Reused, tc.reused)
			}
			if same := bytes.Equal(first.CAPEM, second.CAPEM); same != tc.reused {
				t.Errorf("same CA after the second call = %v, want %v", same, tc.reused)
			}
			// Whatever happened, the directory now holds a pair that serves.
			if err := NewFileSource(second.CertFile, second.KeyFile, WithLogger(testLogger(t))).Load(); err != nil {
				t.Errorf("the bundle left in the directory does not load: %v", err)
			}
		})
	}
}

func TestSelfSignedOptions(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Now())
	tests := map[string]struct {
		opts SelfSignedOptions
		want string // error text; empty: success
	}{
		"no directory is an error": {
			opts: SelfSignedOptions{DNSNames: []string{"localhost"}},
			want: "no directory given",
		},
		"no names is an error, since no client could verify the certificate": {
			opts: SelfSignedOptions{Dir: t.TempDir()},
			want: "no DNS names or IP addresses",
		},
		"an IP address alone is enough": {
			opts: SelfSignedOptions{Dir: t.TempDir(), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}},
		},
		"a serving validity longer than the CA's is cut to the CA's": {
			opts: SelfSignedOptions{Dir: t.TempDir(), DNSNames: []string{"localhost"}, CAValidity: 48 * time.Hour, ServingValidity: 1000 * time.Hour, Clock: clk},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b, err := SelfSigned(tc.opts)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("SelfSigned error = %v, want one saying %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ca, leaf := parseCertFile(t, b.CAFile), parseCertFile(t, b.CertFile)
			if leaf.NotAfter.After(ca.NotAfter) {
				t.Errorf("serving certificate outlives its CA: %v > %v", leaf.NotAfter, ca.NotAfter)
			}
		})
	}
}
