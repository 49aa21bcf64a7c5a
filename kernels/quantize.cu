// placeholder, replaced by the quantizer kernels
