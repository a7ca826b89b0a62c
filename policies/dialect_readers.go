package policies

import (
	"github.com/quantumnode/qn-admission/policies/dialect"
	"github.com/quantumnode/qn-admission/policies/dialect/admissionpolicy"
	"github.com/quantumnode/qn-admission/policies/dialect/kyverno"
)

// dialectReaders are the policy dialects a directory may hold besides Rego
// and pattern files, one package each under policies/dialect.
var dialectReaders = []dialect.Reader{kyverno.Reader{}, admissionpolicy.Reader{}}
