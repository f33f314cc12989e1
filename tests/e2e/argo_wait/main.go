// argo-wait runs Argo v4's own resource-template wait (workflow/executor WaitResource, what `argoexec resource`
// does after creating the object) against one object of a live cluster, so tests prove that wf's success and
// failure conditions parse and match as Argo evaluates them, on the status a real controller writes.
//
// Usage: argo-wait <kubeconfig> <template.json> <namespace> <name> <selfLink>
// Exit 0: the success condition matched. Exit 1: Argo's error (e.g. the failure condition that matched).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	wfv1 "github.com/argoproj/argo-workflows/v4/pkg/apis/workflow/v1alpha1"
	"github.com/argoproj/argo-workflows/v4/util/logging"
	"github.com/argoproj/argo-workflows/v4/workflow/executor"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	if len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: argo-wait <kubeconfig> <template.json> <namespace> <name> <selfLink>")
		os.Exit(2)
	}
	kubeconfig, templateFile, namespace, name, selfLink := os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5]
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		fail(2, err)
	}
	clients, err := kubernetes.NewForConfig(config)
	if err != nil {
		fail(2, err)
	}
	raw, err := os.ReadFile(templateFile)
	if err != nil {
		fail(2, err)
	}
	var template wfv1.Template
	if err := json.Unmarshal(raw, &template); err != nil {
		fail(2, err)
	}
	ctx := logging.WithLogger(context.Background(), logging.NewSlogLoggerCustom(logging.Info, logging.Text, os.Stderr))
	we := executor.WorkflowExecutor{Template: template, RESTClient: clients.CoreV1().RESTClient(), Namespace: namespace}
	if err := we.WaitResource(ctx, namespace, name, selfLink); err != nil {
		fail(1, err)
	}
	fmt.Println("succeeded")
}

func fail(code int, err error) {
	fmt.Println(err.Error())
	os.Exit(code)
}
