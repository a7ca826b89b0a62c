package controller

// Everything the process does, the audit's PolicyReports and the
// command's leader election included, is listed here, in one place;
// `make rbac` generates config/rbac/role.yaml from these markers (a
// free-standing comment: controller-gen reads package-level markers).
// +kubebuilder:rbac:groups=qn.dev,resources=quantumnodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=qn.dev,resources=quantumnodes/status,verbs=update;patch
// +kubebuilder:rbac:groups=qn.dev,resources=quantumnodehealthpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=qn.dev,resources=quantumnodehealthpolicies/status,verbs=update;patch
// +kubebuilder:rbac:groups=qn.dev,resources=quantumnoderoletables,verbs=get;create;update;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=controllerrevisions,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=wgpolicyk8s.io,resources=policyreports,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=qn-system,resources=leases,verbs=create
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=qn-system,resources=leases,resourceNames=qn-controller.qn.dev,verbs=get;update
// +kubebuilder:rbac:groups="",namespace=qn-system,resources=events,verbs=create;patch
