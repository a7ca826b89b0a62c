package harness

import (
	"fmt"
	"net"
)

// ControllerOptions tune StartController.
type ControllerOptions struct {
	// Kubeconfig is the file qn-controller reaches the API server through.
	Kubeconfig string
	// Args are flags after the harness's own (kubeconfig, addresses), so
	// they may override them.
	Args []string
	// Process are the process's options (environment, output kept).
	Process ProcessOptions
}

// Controller is a running qn-controller.
type Controller struct {
	*Process
	// Metrics and Probe are host:port of its metrics and probe listeners.
	Metrics, Probe string
}

// StartController runs the qn-controller binary bin against
// opts.Kubeconfig with its metrics and probes on free loopback ports. It
// does not wait: a test waits for what it looks for (a probe, an exit).
// The API server is reached only through the kubeconfig, never as from
// inside a Pod.
func StartController(bin string, opts ControllerOptions) (*Controller, error) {
	metrics, err := FreeAddress()
	if err != nil {
		return nil, err
	}
	probe, err := FreeAddress()
	if err != nil {
		return nil, err
	}
	args := append([]string{"--kubeconfig=" + opts.Kubeconfig,
		"--metrics-bind-address=" + metrics, "--health-probe-bind-address=" + probe}, opts.Args...)
	opts.Process.Env = append([]string{"KUBERNETES_SERVICE_HOST="}, opts.Process.Env...)
	p, err := Start(bin, args, opts.Process)
	if err != nil {
		return nil, err
	}
	return &Controller{Process: p, Metrics: metrics, Probe: probe}, nil
}

// FreeAddress is a loopback address whose port is free right now, for a
// binary that cannot listen on port 0 and say which port it got.
func FreeAddress() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}
