"""WavTokenizer decoder (llama.cpp architecture ``wavtokenizer-dec``): audio codes -> waveform."""
