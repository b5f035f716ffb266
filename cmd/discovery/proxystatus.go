package main

import (
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshplane/discovery/pkg/xds/proxystatus"
)

func newProxyStatusCommand() *cobra.Command {
	url := "http://localhost:15014"
	timeout := 10 * time.Second
	cmd := &cobra.Command{
		Use:   "proxy-status",
		Short: "Show whether each connected proxy has the configuration it was sent",
		Long: `Print, for every proxy connected to a discovery instance, each xDS type's
state: SYNCED (the proxy acknowledged the last response), STALE (sent, not
acknowledged yet), NACKED (rejected: the proxy runs its previous
configuration) or NOT SENT, as istioctl proxy-status does. It reads
/debug/syncz from the instance's monitoring port; in a cluster, reach it with
kubectl port-forward -n istio-system deploy/discovery 15014.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client := &http.Client{Timeout: timeout}
			proxies, err := proxystatus.Fetch(cmd.Context(), client, url)
			if err != nil {
				return err
			}
			return proxystatus.Write(cmd.OutOrStdout(), proxies, time.Now())
		},
	}
	cmd.Flags().StringVar(&url, "monitoring-url", url, "URL of the discovery instance's monitoring server (port 15014).")
	cmd.Flags().DurationVar(&timeout, "timeout", timeout, "How long to wait for the answer.")
	return cmd
}
