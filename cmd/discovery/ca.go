package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshplane/discovery/pkg/ca"
)

func newCACommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "The CA's root: rotate it without restarts",
	}
	cmd.AddCommand(newCARotateCommand(), newCAStatusCommand())
	return cmd
}

func newCARotateCommand() *cobra.Command {
	var f tagFlags
	o := ca.RotateOptions{Overlap: 24 * time.Hour}
	cmd := &cobra.Command{
		Use:   "rotate [--finish]",
		Short: "Rotate the self-signed root by cross-signing, in two steps",
		Long: `Rotates the root of the self-signed CA (the istio-ca-secret Secret) with no
restart and no failed handshake, in two steps:

  discovery ca rotate            a new root, cross-signed by the old one, signs
                                 from now on; both roots are published
  discovery ca rotate --finish   after the overlap: the new root alone

Between the steps, certificates chain to both roots, so workloads that have
not renewed yet and those that have trust each other. Finish once every
certificate issued under the old root alone has expired: --overlap is that
time (pilot-agent asks for 24h certificates by default), and finishing
earlier is refused without --force. Every replica picks each step up from
its watch of the Secret. A plugged-in CA (cacerts) is rotated by its
operator instead: SECURITY.md says how.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := f.client()
			if err != nil {
				return err
			}
			o.Namespace = f.namespace
			st, err := ca.RotateRoot(cmd.Context(), client, o)
			if err != nil {
				return err
			}
			writeRotationStatus(cmd.OutOrStdout(), st)
			if st.Step == "started" {
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "Run `discovery ca rotate --finish` after %s.\n", st.FinishAfter.UTC().Format(time.RFC3339))
			}
			return err
		},
	}
	f.add(cmd)
	cmd.Flags().BoolVar(&o.Finish, "finish", false, "Take the second step: the new root alone.")
	cmd.Flags().DurationVar(&o.Overlap, "overlap", o.Overlap, "Least time between the two steps: the longest lifetime of a workload certificate issued before the first.")
	cmd.Flags().BoolVar(&o.Force, "force", false, "Finish before the overlap has passed (workloads that have not renewed lose mTLS with the others).")
	return cmd
}

func newCAStatusCommand() *cobra.Command {
	var f tagFlags
	overlap := 24 * time.Hour
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the roots in force and any rotation in progress",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := f.client()
			if err != nil {
				return err
			}
			st, err := ca.RootStatus(cmd.Context(), client, f.namespace, overlap)
			if err != nil {
				return err
			}
			writeRotationStatus(cmd.OutOrStdout(), st)
			return nil
		},
	}
	f.add(cmd)
	cmd.Flags().DurationVar(&overlap, "overlap", overlap, "The overlap the rotation uses, to say when it may finish.")
	return cmd
}

func writeRotationStatus(w io.Writer, st ca.RotationStatus) {
	fmt.Fprintf(w, "Rotation: %s\nSigning certificate: %s\n", st.Step, st.Signer)
	for _, r := range st.Roots {
		fmt.Fprintf(w, "Root: %s\n", r)
	}
	if !st.Started.IsZero() {
		fmt.Fprintf(w, "Started: %s\nMay finish after: %s\n", st.Started.UTC().Format(time.RFC3339), st.FinishAfter.UTC().Format(time.RFC3339))
	}
}
