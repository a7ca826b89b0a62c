package harness

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// ProcessOptions tune Start.
type ProcessOptions struct {
	// Env is added to this process's environment.
	Env []string
	// OnLine sees every line the process writes to stdout, as it comes.
	OnLine func(line []byte)
	// KeepLast bounds the output kept to its last bytes (0 keeps it all):
	// a process under load for a long time would otherwise hold its every
	// log line.
	KeepLast int
	// StopGrace is how long Stop waits after SIGTERM before it kills the
	// process (default 30s).
	StopGrace time.Duration
}

// Process is a running child process whose output (stdout and stderr) is
// kept for a failure's message.
type Process struct {
	cmd    *exec.Cmd
	opts   ProcessOptions
	exited chan struct{}
	output Output
}

// Start runs bin with args.
func Start(bin string, args []string, opts ProcessOptions) (*Process, error) {
	if opts.StopGrace <= 0 {
		opts.StopGrace = 30 * time.Second
	}
	p := &Process{cmd: exec.Command(bin, args...), opts: opts, exited: make(chan struct{}), output: Output{KeepLast: opts.KeepLast}}
	if len(opts.Env) > 0 {
		p.cmd.Env = append(os.Environ(), opts.Env...)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.cmd.Stderr = &p.output
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			_, _ = p.output.Write(append(sc.Bytes(), '\n'))
			if opts.OnLine != nil {
				opts.OnLine(sc.Bytes())
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		<-scanned
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// Name is the binary's file name.
func (p *Process) Name() string { return filepath.Base(p.cmd.Path) }

// PID is the process id, for what /proc says of it.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Exited is closed once the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Logs returns what the process printed so far (its tail, with KeepLast).
func (p *Process) Logs() string { return p.output.String() }

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// ExitCode is the exit code once the process has exited (-1 before, or
// when a signal ended it).
func (p *Process) ExitCode() int {
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	default:
		return -1
	}
}

// Stop sends SIGTERM and waits for the process to exit, killing it after
// StopGrace. It is an error when the process had to be killed or exited
// with a code other than 0; stopping a process that has exited reports
// how it exited.
func (p *Process) Stop() error {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(p.opts.StopGrace):
			_ = p.cmd.Process.Kill()
			<-p.exited
			return fmt.Errorf("%s did not exit within %s of SIGTERM:\n%s", p.Name(), p.opts.StopGrace, p.Logs())
		}
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		return fmt.Errorf("%s exited with code %d:\n%s", p.Name(), code, p.Logs())
	}
	return nil
}

// Output is an io.Writer that keeps what is written to it, safe for
// concurrent use: a child process's output, or a logger's.
type Output struct {
	// KeepLast bounds what is kept to the last bytes written (0: all).
	KeepLast int

	mu  sync.Mutex
	buf []byte
}

func (o *Output) Write(b []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf = append(o.buf, b...)
	if o.KeepLast > 0 && len(o.buf) > o.KeepLast {
		o.buf = append(o.buf[:0], o.buf[len(o.buf)-o.KeepLast:]...)
	}
	return len(b), nil
}

// String returns what was kept.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return string(o.buf)
}
