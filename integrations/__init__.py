"""Framework integrations of ptp_callback (packaged as ``ptp_callback.integrations``)."""
