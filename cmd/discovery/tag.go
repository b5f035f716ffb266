package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/meshplane/discovery/pkg/webhook/inject"
)

// tagFlags are the flags every tag command takes.
type tagFlags struct {
	kubeconfig string
	namespace  string
}

func (f *tagFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.kubeconfig, "kubeconfig", "", "Path of a kubeconfig file (default: KUBECONFIG, ~/.kube/config, in-cluster).")
	cmd.Flags().StringVar(&f.namespace, "namespace", "istio-system", "Namespace of the control plane.")
}

func (f *tagFlags) client() (kubernetes.Interface, error) {
	cfg, err := installRestConfig(f.kubeconfig)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

func newTagCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tag",
		Short: "Revision tags: stable names for a revision, as istioctl tag makes them",
		Long: `A revision tag is a name that namespaces (and pods) select with istio.io/rev=<tag>
instead of a revision's own name; moving the tag moves them all to another
revision at their next restart. It is Istio's MutatingWebhookConfiguration
istio-revision-tag-<tag> (and Service istiod-revision-tag-<tag>), so
istioctl tag list sees discovery's tags and discovery's injector serves the
tags istioctl makes. The tag "default" also takes istio-injection=enabled
namespaces and pods labelled sidecar.istio.io/inject=true.`,
	}
	cmd.AddCommand(newTagSetCommand(), newTagListCommand(), newTagRemoveCommand())
	return cmd
}

func newTagSetCommand() *cobra.Command {
	var f tagFlags
	revision := "default"
	overwrite := false
	cmd := &cobra.Command{
		Use:     "set TAG --revision REVISION",
		Short:   "Point a revision tag at a revision (create or move it)",
		Example: "  discovery tag set prod --revision 1-32\n  kubectl label namespace shop istio.io/rev=prod",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := f.client()
			if err != nil {
				return err
			}
			tag := args[0]
			if err := inject.SetTag(cmd.Context(), client, tag, revision, inject.TagOptions{Namespace: f.namespace, Overwrite: overwrite}); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "Revision tag %q points at revision %q. Label namespaces istio.io/rev=%s to use it; their pods are injected by that revision from their next restart.\n",
				tag, revision, tag)
			return err
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&revision, "revision", revision, "Revision the tag points at.")
	cmd.Flags().BoolVar(&overwrite, "overwrite", overwrite, "Move a tag that points at another revision.")
	return cmd
}

func newTagListCommand() *cobra.Command {
	var f tagFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the revision tags, the revision each points at and the namespaces that use it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := f.client()
			if err != nil {
				return err
			}
			tags, err := inject.ListTags(cmd.Context(), client)
			if err != nil {
				return err
			}
			if len(tags) == 0 {
				_, err := fmt.Fprintln(cmd.OutOrStdout(), "No revision tags.")
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "TAG\tREVISION\tNAMESPACES")
			for _, t := range tags {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Tag, t.Revision, strings.Join(t.Namespaces, ","))
			}
			return tw.Flush()
		},
	}
	f.add(cmd)
	return cmd
}

func newTagRemoveCommand() *cobra.Command {
	var f tagFlags
	yes := false
	cmd := &cobra.Command{
		Use:   "remove TAG",
		Short: "Remove a revision tag",
		Long: `Remove a revision tag's webhook configuration and Service. Pods created
afterwards in namespaces that still select the tag are not injected, so
with such namespaces it asks for -y.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := f.client()
			if err != nil {
				return err
			}
			tag := args[0]
			ns, err := inject.TagNamespaces(cmd.Context(), client, tag)
			if err != nil {
				return err
			}
			if len(ns) > 0 && !yes {
				return fmt.Errorf("namespaces %s select tag %q: their new pods would not be injected; relabel them or pass -y", strings.Join(ns, ", "), tag)
			}
			found, err := inject.RemoveTag(cmd.Context(), client, tag, f.namespace)
			if err != nil {
				return err
			}
			if !found {
				return fmt.Errorf("no revision tag %q", tag)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "Revision tag %q removed.\n", tag)
			return err
		},
	}
	f.add(cmd)
	cmd.Flags().BoolVarP(&yes, "yes", "y", yes, "Remove the tag even if namespaces still select it.")
	return cmd
}
