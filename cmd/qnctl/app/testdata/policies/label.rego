package demo.label

patch contains {"op": "add", "path": "/metadata/labels/demo~1checked", "value": "true"} if {
	input.request.operation == "CREATE"
	not input.request.object.metadata.labels["demo/checked"]
}
